// Dense layers of the replicated model, on a BLAS (OpenBLAS) on the CPU; the
// CUDA path (cuBLAS) mirrors these declarations in kernels/cuda/.
//
// Layouts, row-major: x [batch x in], W [out x in] (torch's Linear layout),
// b [out], y [batch x out].
#pragma once

#include <cstdint>

namespace tessera::kernels {

// Threads the BLAS may use in this process (trainers use 1 per process by
// default: several share a host's cores).
void SetBlasThreads(int threads);
// The threads it may use now.
int BlasThreads();

// y = x W^T + b.
void LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out, float* y);

// dW += dy^T x and db += column sums of dy (both skipped when dW is null);
// dx = dy W (skipped when dx is null). A backward pass may so take the
// inputs' gradients first and the weights' later.
void LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out,
                    float* dW, float* db, float* dx);

// x = max(x, 0), in place.
void ReluForward(float* x, int64_t n);
// dy[i] = 0 where y[i] <= 0 (y is the ReLU's output), in place.
void ReluBackward(const float* y, float* dy, int64_t n);

// Sum over i of BCE-with-logits(logits[i], labels[i]), in double, computed in
// the numerically stable form max(z,0) - z*y + log(1 + exp(-|z|)).
double SigmoidBceLossSum(const float* logits, const float* labels, int64_t n);
// dlogits[i] = scale * (sigmoid(logits[i]) - labels[i]).
void SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale, float* dlogits);

}  // namespace tessera::kernels
