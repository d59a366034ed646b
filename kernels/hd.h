// TESSERA_HD marks the per-element arithmetic that both the CPU kernels and the
// CUDA kernels run, so the CPU tests exercise the exact code the GPU executes.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif
