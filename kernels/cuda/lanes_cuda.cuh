// How the CUDA kernels split work over threads, shared by the .cu files.
//
// A bag (forward), a unique row (backward) or an optimizer row is handled by a
// group of `lanes` consecutive threads of one warp, lanes a power of two <= 32.
// Lane l owns columns [l*V, l*V + V), then the same plus lanes*V, and so on
// (a "tile" of lanes*V columns per pass), V = 4 (one 16-byte load or store per
// lane) when the row layout allows it, else 1. The group is as small as
// covers the row in one tile, so a warp holds 32 bags of dim 4 but one of 128.
// Each lane accumulates its columns over the ids in increasing order, exactly
// as the CPU kernels do per element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels::cuda_detail {

constexpr int kBlockThreads = 256;

// log2 of the lanes per group for a row of `dim` floats read V at a time.
inline int LanesLog2(int dim, int vec) {
  const int need = (dim + vec - 1) / vec;
  int log2 = 0;
  while ((1 << log2) < need && log2 < 5) ++log2;
  return log2;
}

// Blocks of kBlockThreads for `groups` groups of 2^lanes_log2 threads.
inline int64_t BlocksFor(int64_t groups, int lanes_log2) {
  const int64_t threads = groups << lanes_log2;
  return (threads + kBlockThreads - 1) / kBlockThreads;
}

__host__ __device__ __forceinline__ bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// A launch's configuration error, or an earlier asynchronous fault.
inline Status CheckLaunch(const char* what) { return FromCuda(cudaGetLastError(), what); }

template <int V>
struct Floats {
  float x[V];
};

template <int V>
__device__ __forceinline__ Floats<V> ZeroFloats() {
  Floats<V> f;
#pragma unroll
  for (int e = 0; e < V; ++e) f.x[e] = 0.0f;
  return f;
}

// V floats at p. kAligned: p is known to be 16-byte aligned when V == 4;
// otherwise the alignment is checked here (rows reached through pointers may
// sit anywhere). kReadOnly: the memory is not written during the kernel, so
// the read-only data path may be used.
template <int V, bool kAligned, bool kReadOnly>
__device__ __forceinline__ Floats<V> LoadFloats(const float* p) {
  Floats<V> f;
  if (V == 4 && (kAligned || Aligned16(p))) {
    float4 v;
    if constexpr (kReadOnly) {
      v = __ldg(reinterpret_cast<const float4*>(p));
    } else {
      v = *reinterpret_cast<const float4*>(p);
    }
    f.x[0] = v.x;
    f.x[V > 1 ? 1 : 0] = v.y;
    f.x[V > 2 ? 2 : 0] = v.z;
    f.x[V > 3 ? 3 : 0] = v.w;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if constexpr (kReadOnly) {
        f.x[e] = __ldg(p + e);
      } else {
        f.x[e] = p[e];
      }
    }
  }
  return f;
}

template <int V, bool kAligned>
__device__ __forceinline__ void StoreFloats(float* p, const Floats<V>& f) {
  if (V == 4 && (kAligned || Aligned16(p))) {
    *reinterpret_cast<float4*>(p) = make_float4(f.x[0], f.x[V > 1 ? 1 : 0], f.x[V > 2 ? 2 : 0], f.x[V > 3 ? 3 : 0]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) p[e] = f.x[e];
  }
}

// This thread's group and its lane in it.
struct GroupLane {
  int64_t group;
  int lane;
  int lanes;
};

__device__ __forceinline__ GroupLane ThisGroupLane(int lanes_log2) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  return GroupLane{t >> lanes_log2, static_cast<int>(t & ((1 << lanes_log2) - 1)), 1 << lanes_log2};
}

}  // namespace tessera::kernels::cuda_detail
