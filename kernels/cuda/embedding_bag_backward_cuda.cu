// Embedding-bag backward on CUDA: the gradient of each row is the sum, over
// the ids pointing at it in increasing id order, of the id's scale times its
// bag's upstream gradient: a segmented sum after sorting, with no atomics.
//
//   1. sort (index, position) pairs by index (CUB radix sort, stable: a row's
//      positions stay increasing), over only the bits num_rows needs
//   2. each row's range [row_begin, row_end) in the sorted order
//   3. cut every row's range into segments of at most kBackwardSegmentIds ids;
//      number them (one scan): a row with one segment is summed straight into
//      grad_rows, a longer row's segments into numbered partial sums
//   4. one lane group per segment sums its ids in order (the CPU's order)
//   5. one lane group per row adds a long row's partials in order, and writes
//      zeros for a row no id reached
// Layout of the scratch buffer: see BackwardScratch.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cuda/embedding_bag_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"
#include "kernels/embedding_bag_math.h"

namespace tessera::kernels {
namespace {

using cuda_detail::Floats;
using cuda_detail::LoadFloats;
using cuda_detail::StoreFloats;

constexpr int kSeg = kBackwardSegmentIds;
constexpr int kUnrollIds = 8;
constexpr unsigned kThreads = cuda_detail::kBlockThreads;

unsigned BlocksOf(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Carves the scratch buffer into 256-byte aligned arrays.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(int64_t count) {
    T* p = reinterpret_cast<T*>(base_ == nullptr ? nullptr : base_ + used_);
    used_ += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// n = num_ids, R = num_rows; S_max bounds the number of segments: each row
// reached has at most 1 + c/kSeg of them, so S <= min(n, R + n / kSeg); a long
// row (c > kSeg) has at most 2c/kSeg, so partials <= 2n / kSeg.
template <typename Index>
struct BackwardScratch {
  Index* sorted_keys;      // [n]
  int32_t* positions;      // [n] 0, 1, ..., n-1
  int32_t* sorted_pos;     // [n]
  int32_t* row_begin;      // [R]
  int32_t* row_end;        // [R]
  int64_t* seg_flags;      // [n] at a segment start: 1 + (long row ? 2^32 : 0)
  int64_t* seg_ids;        // [n] exclusive scan of seg_flags: low 32 bits segment, high 32 partial
  int64_t* sorted_bag;     // [n] the output row of grad_out each sorted id reads
  float* sorted_scale;     // [n] EmbeddingBagGradScale of each sorted id
  int32_t* seg_start;      // [S_max]
  int32_t* seg_partial;    // [S_max] partial slot, -1 for a row with one segment
  int32_t* num_segments;   // [1]
  float* partials;         // [(2n / kSeg + 1) x dim]
  void* cub_temp;
  size_t cub_bytes;

  static size_t Carve(char* base, int64_t n, int64_t rows, int dim, size_t cub_bytes, BackwardScratch* s) {
    Carver c(base);
    const int64_t seg_max = std::min(n, rows + n / kSeg);
    s->sorted_keys = c.Take<Index>(n);
    s->positions = c.Take<int32_t>(n);
    s->sorted_pos = c.Take<int32_t>(n);
    s->row_begin = c.Take<int32_t>(rows);
    s->row_end = c.Take<int32_t>(rows);
    s->seg_flags = c.Take<int64_t>(n);
    s->seg_ids = c.Take<int64_t>(n);
    s->sorted_bag = c.Take<int64_t>(n);
    s->sorted_scale = c.Take<float>(n);
    s->seg_start = c.Take<int32_t>(seg_max);
    s->seg_partial = c.Take<int32_t>(seg_max);
    s->num_segments = c.Take<int32_t>(1);
    s->partials = c.Take<float>((2 * n / kSeg + 1) * dim);
    s->cub_temp = c.Take<char>(static_cast<int64_t>(cub_bytes));
    s->cub_bytes = cub_bytes;
    return c.used();
  }
};

__global__ void IotaKernel(int32_t* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<int32_t>(i);
}

template <typename Index>
__global__ void RowRangesKernel(const Index* sorted_keys, int64_t n, int32_t* row_begin, int32_t* row_end) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= n) return;
  const Index k = sorted_keys[p];
  if (p == 0 || sorted_keys[p - 1] != k) row_begin[k] = static_cast<int32_t>(p);
  if (p == n - 1 || sorted_keys[p + 1] != k) row_end[k] = static_cast<int32_t>(p + 1);
}

// The bag holding id `pos`: the last b with offsets[b] <= pos.
__device__ __forceinline__ int64_t BagOf(const int64_t* offsets, int64_t num_bags, int64_t pos) {
  int64_t lo = 0, hi = num_bags;  // offsets[lo] <= pos < offsets[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= pos) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <typename Index>
struct SegmentInfoParams {
  const Index* sorted_keys;
  const int32_t* sorted_pos;
  const int32_t* row_begin;
  const int32_t* row_end;
  const int64_t* offsets;
  const float* weights;
  int64_t num_bags;
  Pooling pooling;
  int64_t n;
  int64_t* seg_flags;
  int64_t* sorted_bag;
  float* sorted_scale;
};

// Per sorted id: its segment-start flag, the grad_out row it reads and its scale.
template <typename Index>
__global__ void SegmentInfoKernel(SegmentInfoParams<Index> p) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= p.n) return;
  const Index k = p.sorted_keys[q];
  const int32_t begin = p.row_begin[k];
  const int32_t count = p.row_end[k] - begin;
  const bool start = (q - begin) % kSeg == 0;
  p.seg_flags[q] = start ? (int64_t{1} | (count > kSeg ? (int64_t{1} << 32) : 0)) : 0;
  const int32_t pos = p.sorted_pos[q];
  float bag_scale = 1.0f;
  int64_t bag = pos;
  if (p.pooling != Pooling::kNone) {
    bag = BagOf(p.offsets, p.num_bags, pos);
    bag_scale = BagScale(p.pooling, p.offsets[bag + 1] - p.offsets[bag]);
  }
  p.sorted_bag[q] = bag;
  p.sorted_scale[q] = EmbeddingBagGradScale(bag_scale, p.weights != nullptr ? p.weights[pos] : 1.0f);
}

__global__ void SegmentStartsKernel(const int64_t* seg_flags, const int64_t* seg_ids, int64_t n, int32_t* seg_start,
                                    int32_t* seg_partial, int32_t* num_segments) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= n) return;
  const int64_t flag = seg_flags[q];
  const int64_t id = seg_ids[q];
  const int32_t seg = static_cast<int32_t>(id & 0xffffffff);
  if (flag != 0) {
    seg_start[seg] = static_cast<int32_t>(q);
    seg_partial[seg] = (flag >> 32) != 0 ? static_cast<int32_t>(id >> 32) : -1;
  }
  if (q == n - 1) *num_segments = seg + (flag != 0 ? 1 : 0);
}

template <typename Index>
struct SegmentSumParams {
  const Index* sorted_keys;
  const int64_t* sorted_bag;
  const float* sorted_scale;
  const int32_t* row_end;
  const int32_t* seg_start;
  const int32_t* seg_partial;
  const int32_t* num_segments;
  const float* grad_out;
  int dim;
  int lanes_log2;
  float* grad_rows;
  float* partials;
};

// One group per segment: sums its ids in increasing position, like the CPU.
template <int V, typename Index>
__global__ void __launch_bounds__(cuda_detail::kBlockThreads) SegmentSumKernel(SegmentSumParams<Index> p) {
  const cuda_detail::GroupLane g = cuda_detail::ThisGroupLane(p.lanes_log2);
  if (g.group >= *p.num_segments) return;
  const int64_t begin = p.seg_start[g.group];
  const Index row = p.sorted_keys[begin];
  const int64_t end = min(static_cast<int64_t>(p.row_end[row]), begin + kSeg);
  const int32_t partial = p.seg_partial[g.group];
  float* dst = partial < 0 ? p.grad_rows + static_cast<int64_t>(row) * p.dim : p.partials + int64_t{partial} * p.dim;
  for (int c = g.lane * V; c < p.dim; c += g.lanes * V) {
    Floats<V> acc = cuda_detail::ZeroFloats<V>();
    int64_t q = begin;
    for (; q + kUnrollIds <= end; q += kUnrollIds) {
      Floats<V> x[kUnrollIds];
      float s[kUnrollIds];
#pragma unroll
      for (int u = 0; u < kUnrollIds; ++u) {
        s[u] = p.sorted_scale[q + u];
        x[u] = LoadFloats<V, true, true>(p.grad_out + p.sorted_bag[q + u] * p.dim + c);
      }
#pragma unroll
      for (int u = 0; u < kUnrollIds; ++u) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc.x[e] = EmbeddingBagAccumulate(acc.x[e], s[u], x[u].x[e]);
      }
    }
    for (; q < end; ++q) {
      const Floats<V> x = LoadFloats<V, true, true>(p.grad_out + p.sorted_bag[q] * p.dim + c);
      const float s = p.sorted_scale[q];
#pragma unroll
      for (int e = 0; e < V; ++e) acc.x[e] = EmbeddingBagAccumulate(acc.x[e], s, x.x[e]);
    }
    StoreFloats<V, true>(dst + c, acc);
  }
}

struct CombineParams {
  const int32_t* row_begin;
  const int32_t* row_end;
  const int64_t* seg_ids;
  const float* partials;
  int64_t num_rows;
  int dim;
  int lanes_log2;
  float* grad_rows;
};

// One group per row: zeros for a row no id reached; a long row's partial sums
// added in segment order; nothing for a row of one segment (already written).
template <int V>
__global__ void __launch_bounds__(cuda_detail::kBlockThreads) CombineKernel(CombineParams p) {
  const cuda_detail::GroupLane g = cuda_detail::ThisGroupLane(p.lanes_log2);
  if (g.group >= p.num_rows) return;
  const int32_t begin = p.row_begin[g.group];
  const int32_t count = p.row_end[g.group] - begin;
  if (count > 0 && count <= kSeg) return;
  float* dst = p.grad_rows + g.group * p.dim;
  const int32_t num_partials = (count + kSeg - 1) / kSeg;
  const float* first = count > 0 ? p.partials + (p.seg_ids[begin] >> 32) * p.dim : nullptr;
  for (int c = g.lane * V; c < p.dim; c += g.lanes * V) {
    Floats<V> acc = cuda_detail::ZeroFloats<V>();
    for (int32_t t = 0; t < num_partials; ++t) {
      const Floats<V> x = LoadFloats<V, true, false>(first + int64_t{t} * p.dim + c);
#pragma unroll
      for (int e = 0; e < V; ++e) acc.x[e] += x.x[e];
    }
    StoreFloats<V, true>(dst + c, acc);
  }
}

template <typename Index>
Status SortByRow(const EmbeddingBagBackwardArgs<Index>& a, int n, const BackwardScratch<Index>& s, int end_bit,
                 cudaStream_t stream) {
  size_t bytes = s.cub_bytes;
  return FromCuda(cub::DeviceRadixSort::SortPairs(s.cub_temp, bytes, a.indices, s.sorted_keys, s.positions,
                                                  s.sorted_pos, n, 0, end_bit, stream),
                  "EmbeddingBagBackwardCuda: radix sort");
}

template <int V, typename Index>
Status LaunchSums(const EmbeddingBagBackwardArgs<Index>& a, int64_t n, const BackwardScratch<Index>& s,
                  cudaStream_t stream) {
  const int lanes_log2 = cuda_detail::LanesLog2(a.dim, V);
  const int64_t seg_max = std::min(n, a.num_rows + n / kSeg);
  SegmentSumParams<Index> sp{s.sorted_keys, s.sorted_bag, s.sorted_scale, s.row_end,  s.seg_start, s.seg_partial,
                             s.num_segments, a.grad_out,  a.dim,          lanes_log2, a.grad_rows,  s.partials};
  SegmentSumKernel<V><<<static_cast<unsigned>(cuda_detail::BlocksFor(seg_max, lanes_log2)), kThreads, 0, stream>>>(sp);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: segment sums"));
  CombineParams cp{s.row_begin, s.row_end, s.seg_ids, s.partials, a.num_rows, a.dim, lanes_log2, a.grad_rows};
  CombineKernel<V><<<static_cast<unsigned>(cuda_detail::BlocksFor(a.num_rows, lanes_log2)), kThreads, 0, stream>>>(cp);
  return cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: combine");
}

}  // namespace

template <typename Index>
Status EmbeddingBagBackwardCuda(const EmbeddingBagBackwardArgs<Index>& a, int64_t num_ids, DeviceBuffer* scratch,
                                cudaStream_t stream) {
  if (a.dim <= 0) return Status::InvalidArgument("EmbeddingBagBackwardCuda: dim must be positive");
  if (num_ids < 0 || num_ids >= INT32_MAX) {
    return Status::InvalidArgument("EmbeddingBagBackwardCuda: num_ids must be in [0, 2^31 - 1)");
  }
  if (a.num_rows <= 0) return Status::OK();
  if (cuda_detail::BlocksFor(a.num_rows, 5) > INT32_MAX) {
    return Status::InvalidArgument("EmbeddingBagBackwardCuda: too many rows for one launch");
  }
  const size_t grad_bytes = static_cast<size_t>(a.num_rows) * a.dim * sizeof(float);
  if (num_ids == 0) {
    return FromCuda(cudaMemsetAsync(a.grad_rows, 0, grad_bytes, stream), "EmbeddingBagBackwardCuda: zero grad_rows");
  }
  const int n = static_cast<int>(num_ids);
  // Only the bits a row index can have are sorted on.
  const int end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(a.num_rows - 1))));

  size_t sort_bytes = 0, scan_bytes = 0;
  TESSERA_RETURN_IF_ERROR(FromCuda(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const Index*>(nullptr),
                                      static_cast<Index*>(nullptr), static_cast<const int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), n, 0, end_bit, stream),
      "EmbeddingBagBackwardCuda: sort size"));
  TESSERA_RETURN_IF_ERROR(FromCuda(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int64_t*>(nullptr),
                                                                 static_cast<int64_t*>(nullptr), n, stream),
                                   "EmbeddingBagBackwardCuda: scan size"));
  const size_t cub_bytes = std::max(sort_bytes, scan_bytes);
  BackwardScratch<Index> s;
  TESSERA_RETURN_IF_ERROR(scratch->Reserve(BackwardScratch<Index>::Carve(nullptr, n, a.num_rows, a.dim, cub_bytes, &s)));
  BackwardScratch<Index>::Carve(scratch->as<char>(), n, a.num_rows, a.dim, cub_bytes, &s);

  IotaKernel<<<BlocksOf(n), kThreads, 0, stream>>>(s.positions, n);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: iota"));
  TESSERA_RETURN_IF_ERROR(SortByRow(a, n, s, end_bit, stream));

  const size_t range_bytes = static_cast<size_t>(a.num_rows) * sizeof(int32_t);
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaMemsetAsync(s.row_begin, 0, range_bytes, stream), "zero row_begin"));
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaMemsetAsync(s.row_end, 0, range_bytes, stream), "zero row_end"));
  RowRangesKernel<<<BlocksOf(n), kThreads, 0, stream>>>(s.sorted_keys, n, s.row_begin, s.row_end);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: row ranges"));

  SegmentInfoParams<Index> ip{s.sorted_keys, s.sorted_pos, s.row_begin, s.row_end,    a.offsets,       a.weights,
                              a.num_bags,    a.pooling,    n,           s.seg_flags, s.sorted_bag, s.sorted_scale};
  SegmentInfoKernel<<<BlocksOf(n), kThreads, 0, stream>>>(ip);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: segment info"));
  size_t scan_temp = s.cub_bytes;
  TESSERA_RETURN_IF_ERROR(
      FromCuda(cub::DeviceScan::ExclusiveSum(s.cub_temp, scan_temp, s.seg_flags, s.seg_ids, n, stream),
               "EmbeddingBagBackwardCuda: scan"));
  SegmentStartsKernel<<<BlocksOf(n), kThreads, 0, stream>>>(s.seg_flags, s.seg_ids, n, s.seg_start, s.seg_partial,
                                                              s.num_segments);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("EmbeddingBagBackwardCuda: segment starts"));

  const bool aligned = a.dim % 4 == 0 && cuda_detail::Aligned16(a.grad_out) && cuda_detail::Aligned16(a.grad_rows);
  return aligned ? LaunchSums<4>(a, n, s, stream) : LaunchSums<1>(a, n, s, stream);
}

template Status EmbeddingBagBackwardCuda<int32_t>(const EmbeddingBagBackwardArgs<int32_t>&, int64_t, DeviceBuffer*,
                                                  cudaStream_t);
template Status EmbeddingBagBackwardCuda<int64_t>(const EmbeddingBagBackwardArgs<int64_t>&, int64_t, DeviceBuffer*,
                                                  cudaStream_t);

}  // namespace tessera::kernels
