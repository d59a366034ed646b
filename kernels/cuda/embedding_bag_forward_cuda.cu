// Embedding-bag forward on CUDA: a group of lanes per bag (lanes_cuda.cuh),
// each lane summing its columns over the bag's ids in increasing order with
// EmbeddingBagAccumulate, as the CPU does per element: the same bits.
//
// The pass is bound by row reads at random rows. A lane keeps kUnrollIds row
// reads in flight: it reads the next kUnrollIds ids, then their rows, then
// adds them in order, so the order of the additions never changes.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/embedding_bag_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"
#include "kernels/embedding_bag_math.h"

namespace tessera::kernels {
namespace {

using cuda_detail::Floats;
using cuda_detail::LoadFloats;
using cuda_detail::StoreFloats;

constexpr int kUnrollIds = 8;

// Row k of the table: rows `stride` floats apart in one array (16-byte aligned
// when V == 4, which the launcher checks), or wherever a pointer says.
struct StridedRows {
  static constexpr bool kAligned = true;
  const float* base;
  int64_t stride;
  __device__ __forceinline__ const float* operator()(int64_t k) const { return base + k * stride; }
};
struct PointedRows {
  static constexpr bool kAligned = false;
  const float* const* ptrs;
  __device__ __forceinline__ const float* operator()(int64_t k) const { return ptrs[k]; }
};

template <typename Index>
struct ForwardParams {
  const Index* indices;
  const int64_t* offsets;
  const float* weights;
  int64_t num_bags;
  int dim;
  Pooling pooling;
  int lanes_log2;
  float* out;
};

// Sums columns [c, c + V) of the ids [begin, end) into acc, ids in order.
template <int V, bool kWeighted, typename Index, typename Rows>
__device__ __forceinline__ Floats<V> SumColumns(const ForwardParams<Index>& p, Rows rows, int64_t begin, int64_t end,
                                                int c) {
  Floats<V> acc = cuda_detail::ZeroFloats<V>();
  int64_t i = begin;
  for (; i + kUnrollIds <= end; i += kUnrollIds) {
    const float* src[kUnrollIds];
    float w[kUnrollIds];
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) {
      src[u] = rows(static_cast<int64_t>(p.indices[i + u])) + c;
      w[u] = kWeighted ? p.weights[i + u] : 1.0f;
    }
    Floats<V> x[kUnrollIds];
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) x[u] = LoadFloats<V, Rows::kAligned, true>(src[u]);
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) {
#pragma unroll
      for (int e = 0; e < V; ++e) acc.x[e] = EmbeddingBagAccumulate(acc.x[e], w[u], x[u].x[e]);
    }
  }
  for (; i < end; ++i) {
    const Floats<V> x = LoadFloats<V, Rows::kAligned, true>(rows(static_cast<int64_t>(p.indices[i])) + c);
    const float w = kWeighted ? p.weights[i] : 1.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) acc.x[e] = EmbeddingBagAccumulate(acc.x[e], w, x.x[e]);
  }
  return acc;
}

// kNone: writes the ids [begin, end) each to its own output row (a bag of
// one with scale 1, as on the CPU), kUnrollIds row reads in flight.
template <int V, bool kWeighted, typename Index, typename Rows>
__device__ __forceinline__ void CopyColumns(const ForwardParams<Index>& p, Rows rows, int64_t begin, int64_t end,
                                            int c) {
  int64_t i = begin;
  for (; i + kUnrollIds <= end; i += kUnrollIds) {
    const float* src[kUnrollIds];
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) src[u] = rows(static_cast<int64_t>(p.indices[i + u])) + c;
    Floats<V> x[kUnrollIds];
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) x[u] = LoadFloats<V, Rows::kAligned, true>(src[u]);
#pragma unroll
    for (int u = 0; u < kUnrollIds; ++u) {
      const float w = kWeighted ? p.weights[i + u] : 1.0f;
#pragma unroll
      for (int e = 0; e < V; ++e) x[u].x[e] = EmbeddingBagFinish(EmbeddingBagAccumulate(0.0f, w, x[u].x[e]), 1.0f);
      StoreFloats<V, true>(p.out + (i + u) * p.dim + c, x[u]);
    }
  }
  for (; i < end; ++i) {
    Floats<V> x = LoadFloats<V, Rows::kAligned, true>(rows(static_cast<int64_t>(p.indices[i])) + c);
    const float w = kWeighted ? p.weights[i] : 1.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) x.x[e] = EmbeddingBagFinish(EmbeddingBagAccumulate(0.0f, w, x.x[e]), 1.0f);
    StoreFloats<V, true>(p.out + i * p.dim + c, x);
  }
}

// One group per bag: its pooled row (kSum, kMean) or its ids' rows (kNone).
template <int V, bool kWeighted, typename Index, typename Rows>
__global__ void __launch_bounds__(cuda_detail::kBlockThreads)
    ForwardKernel(ForwardParams<Index> p, Rows rows) {
  const cuda_detail::GroupLane g = cuda_detail::ThisGroupLane(p.lanes_log2);
  if (g.group >= p.num_bags) return;
  const int64_t begin = p.offsets[g.group];
  const int64_t end = p.offsets[g.group + 1];
  const int tile = g.lanes * V;
  if (p.pooling == Pooling::kNone) {
    for (int c = g.lane * V; c < p.dim; c += tile) CopyColumns<V, kWeighted>(p, rows, begin, end, c);
    return;
  }
  const float scale = BagScale(p.pooling, end - begin);
  for (int c = g.lane * V; c < p.dim; c += tile) {
    Floats<V> y = SumColumns<V, kWeighted>(p, rows, begin, end, c);
#pragma unroll
    for (int e = 0; e < V; ++e) y.x[e] = EmbeddingBagFinish(y.x[e], scale);
    StoreFloats<V, true>(p.out + g.group * p.dim + c, y);
  }
}

template <int V, bool kWeighted, typename Index, typename Rows>
Status Launch(const ForwardParams<Index>& p, Rows rows, cudaStream_t stream) {
  const int64_t blocks = cuda_detail::BlocksFor(p.num_bags, p.lanes_log2);
  ForwardKernel<V, kWeighted><<<static_cast<unsigned>(blocks), cuda_detail::kBlockThreads, 0, stream>>>(p, rows);
  return cuda_detail::CheckLaunch("EmbeddingBagForwardCuda");
}

template <int V, typename Index, typename Rows>
Status LaunchWeighted(const ForwardParams<Index>& p, Rows rows, cudaStream_t stream) {
  return p.weights != nullptr ? Launch<V, true>(p, rows, stream) : Launch<V, false>(p, rows, stream);
}

}  // namespace

template <typename Index>
Status EmbeddingBagForwardCuda(const EmbeddingBagForwardArgs<Index>& a, cudaStream_t stream) {
  if (a.dim <= 0) return Status::InvalidArgument("EmbeddingBagForwardCuda: dim must be positive");
  if (a.row_ptrs == nullptr && a.row_stride < a.dim) {
    return Status::InvalidArgument("EmbeddingBagForwardCuda: row_stride < dim");
  }
  if (a.num_bags <= 0) return Status::OK();
  // 16-byte accesses when every row start and output row start is aligned
  // (rows through pointers are checked per row in the kernel).
  const bool out_aligned = a.dim % 4 == 0 && cuda_detail::Aligned16(a.out);
  const bool rows_aligned = a.row_ptrs != nullptr || (a.row_stride % 4 == 0 && cuda_detail::Aligned16(a.rows));
  const int vec = out_aligned && rows_aligned ? 4 : 1;
  ForwardParams<Index> p{a.indices, a.offsets, a.weights, a.num_bags, a.dim, a.pooling,
                         cuda_detail::LanesLog2(a.dim, vec), a.out};
  if (cuda_detail::BlocksFor(a.num_bags, p.lanes_log2) > INT32_MAX) {
    return Status::InvalidArgument("EmbeddingBagForwardCuda: too many bags for one launch");
  }
  if (a.row_ptrs != nullptr) {
    const PointedRows rows{a.row_ptrs};
    return vec == 4 ? LaunchWeighted<4>(p, rows, stream) : LaunchWeighted<1>(p, rows, stream);
  }
  const StridedRows rows{a.rows, a.row_stride};
  return vec == 4 ? LaunchWeighted<4>(p, rows, stream) : LaunchWeighted<1>(p, rows, stream);
}

template Status EmbeddingBagForwardCuda<int32_t>(const EmbeddingBagForwardArgs<int32_t>&, cudaStream_t);
template Status EmbeddingBagForwardCuda<int64_t>(const EmbeddingBagForwardArgs<int64_t>&, cudaStream_t);

}  // namespace tessera::kernels
