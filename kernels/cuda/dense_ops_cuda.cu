// Dense layers on cuBLAS, pointwise ops from dense_math.h.
//
// cuBLAS is column-major: a row-major [r x c] matrix is the column-major
// [c x r] one, its transpose. So with row-major x [batch x in], W [out x in]:
//   y^T  [out x batch] = W  * x^T         gemm(T, N, m=out, n=batch, k=in)
//   dW^T [in x out]   += x^T * dy          gemm(N, T, m=in, n=out, k=batch)
//   dx^T [in x batch]  = W^T * dy^T        gemm(N, N, m=in, n=batch, k=out)
//   db   [out]        += dy^T * ones       gemv(N, m=out, n=batch)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "kernels/cuda/dense_ops_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"
#include "kernels/dense_math.h"

namespace tessera::kernels {
namespace {

constexpr unsigned kThreads = cuda_detail::kBlockThreads;
// Blocks of the loss's first pass: a fixed count for a given n, so the
// summation tree (and the result) depends only on n.
constexpr int64_t kMaxLossBlocks = 1024;

// Blocks for a grid-stride loop over n elements.
unsigned GridFor(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

__global__ void BroadcastBiasKernel(const float* b, int64_t rows, int out, float* y) {
  const int64_t total = rows * out;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = b[i % out];
  }
}

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void ReluKernel(float* x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = Relu(x[i]);
  }
}

__global__ void ReluGradKernel(const float* y, float* dy, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dy[i] = ReluGrad(y[i], dy[i]);
  }
}

__global__ void BceGradKernel(const float* logits, const float* labels, int64_t n, float scale, float* dlogits) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dlogits[i] = BceWithLogitsGrad(logits[i], labels[i], scale);
  }
}

// Adds the block's kThreads values in a fixed tree; thread 0 gets the sum.
__device__ double BlockSum(double v) {
  __shared__ double sums[kThreads];
  sums[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  return sums[0];
}

__global__ void __launch_bounds__(kThreads) LossPartialKernel(const float* logits, const float* labels, int64_t n,
                                                              double* partials) {
  double sum = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    sum += static_cast<double>(BceWithLogits(logits[i], labels[i]));
  }
  const double block = BlockSum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

__global__ void __launch_bounds__(kThreads) LossFinalKernel(const double* partials, int num_partials,
                                                            double* loss_sum) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) sum += partials[i];
  const double total = BlockSum(sum);
  if (threadIdx.x == 0) *loss_sum = total;
}

Status CheckShape(int in, int out) {
  if (in <= 0 || out <= 0) return Status::InvalidArgument("DenseOpsCuda: in and out must be positive");
  return Status::OK();
}

}  // namespace

Status FromCublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::OK();
  std::string message = std::string(what) + ": " + cublasGetStatusName(status) + ": " + cublasGetStatusString(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return Status::ResourceExhausted(std::move(message));
  if (status == CUBLAS_STATUS_INVALID_VALUE) return Status::InvalidArgument(std::move(message));
  if (status == CUBLAS_STATUS_NOT_INITIALIZED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    return Status::Unavailable(std::move(message));
  }
  return Status::Internal(std::move(message));
}

StatusOr<std::unique_ptr<DenseOpsCuda>> DenseOpsCuda::Create(cudaStream_t stream) {
  cublasHandle_t handle = nullptr;
  TESSERA_RETURN_IF_ERROR(FromCublas(cublasCreate(&handle), "cublasCreate"));
  std::unique_ptr<DenseOpsCuda> ops(new DenseOpsCuda(handle, stream));
  TESSERA_RETURN_IF_ERROR(FromCublas(cublasSetStream(handle, stream), "cublasSetStream"));
  // Plain FP32 products (no TF32), no atomics: deterministic, close to the CPU.
  TESSERA_RETURN_IF_ERROR(FromCublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  TESSERA_RETURN_IF_ERROR(
      FromCublas(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode"));
  TESSERA_RETURN_IF_ERROR(
      FromCublas(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"));
  return ops;
}

DenseOpsCuda::~DenseOpsCuda() {
  const cublasStatus_t s = cublasDestroy(handle_);
  LOG_IF(WARNING, s != CUBLAS_STATUS_SUCCESS) << "cublasDestroy: " << cublasGetStatusName(s);
}

StatusOr<const float*> DenseOpsCuda::Ones(int64_t n) {
  if (n > num_ones_) {
    TESSERA_RETURN_IF_ERROR(ones_.Reserve(static_cast<size_t>(n) * sizeof(float)));
    FillKernel<<<GridFor(n), kThreads, 0, stream_>>>(ones_.as<float>(), n, 1.0f);
    TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("DenseOpsCuda: ones"));
    num_ones_ = n;
  }
  return static_cast<const float*>(ones_.as<float>());
}

Status DenseOpsCuda::LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out,
                                   float* y) {
  TESSERA_RETURN_IF_ERROR(CheckShape(in, out));
  if (batch <= 0) return Status::OK();
  BroadcastBiasKernel<<<GridFor(batch * out), kThreads, 0, stream_>>>(b, batch, out, y);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("LinearForward: bias"));
  const float one = 1.0f;
  return FromCublas(cublasSgemm_64(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, W, in, x, in, &one, y, out),
                    "LinearForward: cublasSgemm");
}

Status DenseOpsCuda::LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out,
                                    float* dW, float* db, float* dx) {
  TESSERA_RETURN_IF_ERROR(CheckShape(in, out));
  if (batch <= 0) return Status::OK();
  const float one = 1.0f, zero = 0.0f;
  if (dW != nullptr) {
    TESSERA_RETURN_IF_ERROR(FromCublas(
        cublasSgemm_64(handle_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, &one, x, in, dy, out, &one, dW, in),
        "LinearBackward: dW"));
    TESSERA_ASSIGN_OR_RETURN(const float* ones, Ones(batch));
    TESSERA_RETURN_IF_ERROR(
        FromCublas(cublasSgemv_64(handle_, CUBLAS_OP_N, out, batch, &one, dy, out, ones, 1, &one, db, 1),
                   "LinearBackward: db"));
  }
  if (dx == nullptr) return Status::OK();
  return FromCublas(
      cublasSgemm_64(handle_, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, &one, W, in, dy, out, &zero, dx, in),
      "LinearBackward: dx");
}

Status DenseOpsCuda::ReluForward(float* x, int64_t n) {
  if (n <= 0) return Status::OK();
  ReluKernel<<<GridFor(n), kThreads, 0, stream_>>>(x, n);
  return cuda_detail::CheckLaunch("ReluForward");
}

Status DenseOpsCuda::ReluBackward(const float* y, float* dy, int64_t n) {
  if (n <= 0) return Status::OK();
  ReluGradKernel<<<GridFor(n), kThreads, 0, stream_>>>(y, dy, n);
  return cuda_detail::CheckLaunch("ReluBackward");
}

Status DenseOpsCuda::SigmoidBceLossSum(const float* logits, const float* labels, int64_t n, double* loss_sum) {
  if (n <= 0) return FromCuda(cudaMemsetAsync(loss_sum, 0, sizeof(double), stream_), "SigmoidBceLossSum: zero");
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxLossBlocks));
  TESSERA_RETURN_IF_ERROR(loss_partials_.Reserve(kMaxLossBlocks * sizeof(double)));
  double* partials = loss_partials_.as<double>();
  LossPartialKernel<<<blocks, kThreads, 0, stream_>>>(logits, labels, n, partials);
  TESSERA_RETURN_IF_ERROR(cuda_detail::CheckLaunch("SigmoidBceLossSum: partials"));
  LossFinalKernel<<<1, kThreads, 0, stream_>>>(partials, blocks, loss_sum);
  return cuda_detail::CheckLaunch("SigmoidBceLossSum: total");
}

Status DenseOpsCuda::SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale,
                                        float* dlogits) {
  if (n <= 0) return Status::OK();
  BceGradKernel<<<GridFor(n), kThreads, 0, stream_>>>(logits, labels, n, scale, dlogits);
  return cuda_detail::CheckLaunch("SigmoidBceBackward");
}

}  // namespace tessera::kernels
