// Dense layers on a CUDA device: kernels/dense_ops.h's operations, same
// layouts (row-major; x [batch x in], W [out x in], b [out], y [batch x out]),
// device pointers, asynchronous on the stream the object was made for.
//
// Matrix products run on cuBLAS in plain FP32 (CUBLAS_DEFAULT_MATH: no TF32),
// without atomics, so results are deterministic on a given GPU and cuBLAS
// version; they differ from OpenBLAS's by summation order (rounding only).
// The pointwise ops use the shared arithmetic of kernels/dense_math.h.
//
// Not thread-safe: one object per stream. It owns a cuBLAS handle and a small
// scratch buffer (a ones vector for the bias gradient, partial loss sums).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {

// OK for CUBLAS_STATUS_SUCCESS; otherwise "what: <cuBLAS status name>".
Status FromCublas(cublasStatus_t status, const char* what);

class DenseOpsCuda {
 public:
  // On the current device, for work on `stream`.
  static StatusOr<std::unique_ptr<DenseOpsCuda>> Create(cudaStream_t stream);
  ~DenseOpsCuda();
  DenseOpsCuda(const DenseOpsCuda&) = delete;
  DenseOpsCuda& operator=(const DenseOpsCuda&) = delete;

  // y = x W^T + b.
  Status LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out, float* y);
  // dW += dy^T x and db += column sums of dy (both skipped when dW is null);
  // dx = dy W (skipped when dx is null). A backward pass may so take the
  // inputs' gradients first and the weights' later.
  Status LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out, float* dW,
                        float* db, float* dx);
  // x = max(x, 0), in place.
  Status ReluForward(float* x, int64_t n);
  // dy[i] = 0 where y[i] <= 0, in place.
  Status ReluBackward(const float* y, float* dy, int64_t n);
  // *loss_sum (a device double) = sum of BCE-with-logits over the n elements,
  // each in float as on the CPU, summed in double in a fixed tree order.
  Status SigmoidBceLossSum(const float* logits, const float* labels, int64_t n, double* loss_sum);
  // dlogits[i] = scale * (sigmoid(logits[i]) - labels[i]).
  Status SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale, float* dlogits);

 private:
  DenseOpsCuda(cublasHandle_t handle, cudaStream_t stream) : handle_(handle), stream_(stream) {}
  // A device vector of at least n ones.
  StatusOr<const float*> Ones(int64_t n);

  cublasHandle_t handle_;
  cudaStream_t stream_;
  DeviceBuffer ones_;
  int64_t num_ones_ = 0;
  DeviceBuffer loss_partials_;
};

}  // namespace tessera::kernels
