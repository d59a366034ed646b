// One thread per parameter, grid-stride: the dense model has at most a few
// million parameters, and each element is independent.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/dense_optimizer_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"
#include "kernels/dense_optimizer_math.h"

namespace tessera::kernels {
namespace {

constexpr unsigned kThreads = cuda_detail::kBlockThreads;

__global__ void DenseOptimizerKernel(DenseStepArgs a, float* params, const float* grads, float* state, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    switch (a.kind) {
      case DenseOptimizerKind::kSgd:
        DenseSgdElement(a, &params[i], grads[i]);
        break;
      case DenseOptimizerKind::kAdagrad:
        DenseAdagradElement(a, &params[i], &state[i], grads[i]);
        break;
      case DenseOptimizerKind::kAdam:
        DenseAdamElement(a, &params[i], &state[i], &state[n + i], grads[i]);
        break;
    }
  }
}

}  // namespace

Status DenseOptimizerStepCuda(const DenseStepArgs& args, float* params, const float* grads, float* state, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return Status::OK();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  DenseOptimizerKernel<<<blocks, kThreads, 0, stream>>>(args, params, grads, state, n);
  return cuda_detail::CheckLaunch("DenseOptimizerStepCuda");
}

}  // namespace tessera::kernels
