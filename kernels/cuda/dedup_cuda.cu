// Id deduplication on CUDA: an open-addressing hash table (linear probing,
// Fibonacci hashing as on the CPU, at most half full) of
//   keys[slot]      the id, or kEmptyKey
//   first[slot]     the smallest position the id occurs at (atomicMin)
// An id equal to kEmptyKey cannot be stored as a key; it has its own slot,
// the one after the table, so every int64 id works.
//
//   1. fill the table empty
//   2. per id: find or claim its slot (CAS), lower the slot's first position,
//      remember the slot
//   3. per id: flag = (it is its slot's first position)
//   4. exclusive sum of the flags: rank = the id's place in first-seen order
//   5. per first id: unique[rank] = id, slot_rank[slot] = rank
//   6. per id: inverse = slot_rank[slot]
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cuda/dedup_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"

namespace tessera::kernels {
namespace {

constexpr unsigned kThreads = cuda_detail::kBlockThreads;
constexpr unsigned long long kEmptyKey = ~0ull;  // the id -1
constexpr unsigned kNoPosition = 0xffffffffu;
constexpr int64_t kMinCapacity = 64;

unsigned BlocksOf(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

struct Table {
  unsigned long long* keys;  // [capacity + 1]
  unsigned* first;           // [capacity + 1]
  int64_t mask;              // capacity - 1
  int shift;                 // 64 - log2(capacity)
};

__device__ __forceinline__ int64_t SlotOf(unsigned long long key, int shift) {
  return static_cast<int64_t>((key * 0x9e3779b97f4a7c15ull) >> shift);
}

__global__ void FillTableKernel(Table t) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s > t.mask + 1) return;
  t.keys[s] = kEmptyKey;
  t.first[s] = kNoPosition;
}

__global__ void InsertKernel(Table t, const int64_t* ids, int64_t n, int32_t* slot_of) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned long long key = static_cast<unsigned long long>(ids[i]);
  int64_t h = t.mask + 1;  // the empty key's own slot
  if (key != kEmptyKey) {
    h = SlotOf(key, t.shift);
    while (true) {
      // A slot goes from empty to its key once, so a stale read can only
      // show it empty; the CAS then tells the truth.
      const unsigned long long seen = t.keys[h];
      if (seen == key) break;
      if (seen == kEmptyKey) {
        const unsigned long long prev = atomicCAS(&t.keys[h], kEmptyKey, key);
        if (prev == kEmptyKey || prev == key) break;
      }
      h = (h + 1) & t.mask;
    }
  }
  // A stale read of first[] can only be larger than the truth (it only falls).
  if (static_cast<unsigned>(i) < t.first[h]) atomicMin(&t.first[h], static_cast<unsigned>(i));
  slot_of[i] = static_cast<int32_t>(h);
}

__global__ void FirstFlagKernel(const unsigned* first, const int32_t* slot_of, int64_t n, int32_t* flags) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) flags[i] = first[slot_of[i]] == static_cast<unsigned>(i) ? 1 : 0;
}

__global__ void EmitUniqueKernel(const int64_t* ids, const int32_t* slot_of, const int32_t* flags, const int32_t* ranks,
                                 int64_t n, int64_t* unique, int32_t* slot_rank, int32_t* num_unique) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (flags[i] != 0) {
    unique[ranks[i]] = ids[i];
    slot_rank[slot_of[i]] = ranks[i];
  }
  if (i == n - 1) *num_unique = ranks[i] + flags[i];
}

__global__ void InverseKernel(const int32_t* slot_of, const int32_t* slot_rank, int64_t n, int32_t* inverse) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) inverse[i] = slot_rank[slot_of[i]];
}

size_t Round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

Status DedupIdsCuda(const int64_t* ids, int64_t n, int64_t* unique, int32_t* inverse, int32_t* num_unique,
                    DeviceBuffer* scratch, cudaStream_t stream) {
  // The table has up to 4n + 1 slots, numbered in int32.
  if (n < 0 || n >= (int64_t{1} << 29)) return Status::InvalidArgument("DedupIdsCuda: n must be in [0, 2^29)");
  if (n == 0) return FromCuda(cudaMemsetAsync(num_unique, 0, sizeof(int32_t), stream), "DedupIdsCuda: zero count");

  // At most half full: capacity >= 2n.
  const int64_t capacity = std::max<int64_t>(kMinCapacity, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(2 * n))));
  size_t scan_bytes = 0;
  TESSERA_RETURN_IF_ERROR(FromCuda(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int32_t*>(nullptr),
                                                                 static_cast<int32_t*>(nullptr), static_cast<int>(n),
                                                                 stream),
                                   "DedupIdsCuda: scan size"));
  const size_t keys_bytes = Round256((capacity + 1) * sizeof(unsigned long long));
  const size_t first_bytes = Round256((capacity + 1) * sizeof(unsigned));
  const size_t per_id_bytes = Round256(n * sizeof(int32_t));
  // keys | first (reused as slot_rank) | slot_of | flags | ranks | cub temp
  TESSERA_RETURN_IF_ERROR(scratch->Reserve(keys_bytes + first_bytes + 3 * per_id_bytes + scan_bytes));
  char* base = scratch->as<char>();
  Table t{reinterpret_cast<unsigned long long*>(base), reinterpret_cast<unsigned*>(base + keys_bytes), capacity - 1,
          64 - std::countr_zero(static_cast<uint64_t>(capacity))};
  int32_t* slot_of = reinterpret_cast<int32_t*>(base + keys_bytes + first_bytes);
  int32_t* flags = slot_of + per_id_bytes / sizeof(int32_t);
  int32_t* ranks = flags + per_id_bytes / sizeof(int32_t);
  void* cub_temp = base + keys_bytes + first_bytes + 3 * per_id_bytes;

  FillTableKernel<<<BlocksOf(capacity + 1), kThreads, 0, stream>>>(t);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("DedupIdsCuda: fill"));
  InsertKernel<<<BlocksOf(n), kThreads, 0, stream>>>(t, ids, n, slot_of);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("DedupIdsCuda: insert"));
  FirstFlagKernel<<<BlocksOf(n), kThreads, 0, stream>>>(t.first, slot_of, n, flags);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("DedupIdsCuda: flags"));
  TESSERA_RETURN_IF_ERROR(
      FromCuda(cub::DeviceScan::ExclusiveSum(cub_temp, scan_bytes, flags, ranks, static_cast<int>(n), stream),
               "DedupIdsCuda: scan"));
  // The first positions are no longer needed: their array holds slot_rank.
  int32_t* slot_rank = reinterpret_cast<int32_t*>(t.first);
  EmitUniqueKernel<<<BlocksOf(n), kThreads, 0, stream>>>(ids, slot_of, flags, ranks, n, unique, slot_rank, num_unique);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("DedupIdsCuda: emit"));
  InverseKernel<<<BlocksOf(n), kThreads, 0, stream>>>(slot_of, slot_rank, n, inverse);
  return cuda_detail::CheckLaunch("DedupIdsCuda: inverse");
}

}  // namespace tessera::kernels
