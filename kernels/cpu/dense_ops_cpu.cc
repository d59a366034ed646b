// Dense layers on OpenBLAS (row-major cblas_sgemm), pointwise ops from
// dense_math.h.
#include <cblas.h>
#include <glog/logging.h>

#include <cstdint>

#include "kernels/dense_math.h"
#include "kernels/dense_ops.h"

namespace tessera::kernels {

void SetBlasThreads(int threads) {
  CHECK_GT(threads, 0);
  openblas_set_num_threads(threads);
}

int BlasThreads() { return openblas_get_num_threads(); }

void LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out, float* y) {
  CHECK_GT(in, 0);
  CHECK_GT(out, 0);
  if (batch <= 0) return;
  // y = b broadcast over rows, then y += x W^T (beta = 1).
  for (int64_t r = 0; r < batch; ++r) {
    float* yr = y + r * out;
    for (int o = 0; o < out; ++o) yr[o] = b[o];
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(batch), out, in, 1.0f, x, in, W, in, 1.0f,
              y, out);
}

void LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out, float* dW,
                    float* db, float* dx) {
  CHECK_GT(in, 0);
  CHECK_GT(out, 0);
  if (batch <= 0) return;
  const blasint m = static_cast<blasint>(batch);
  if (dW != nullptr) {
    // dW [out x in] += dy^T [out x batch] * x [batch x in].
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, m, 1.0f, dy, out, x, in, 1.0f, dW, in);
    // db += column sums of dy, rows in order.
    for (int64_t r = 0; r < batch; ++r) {
      const float* dyr = dy + r * out;
      for (int o = 0; o < out; ++o) db[o] += dyr[o];
    }
  }
  // dx [batch x in] = dy [batch x out] * W [out x in]; beta = 0 ignores dx's old contents.
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
  }
}

void ReluForward(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Relu(x[i]);
}

void ReluBackward(const float* y, float* dy, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dy[i] = ReluGrad(y[i], dy[i]);
}

double SigmoidBceLossSum(const float* logits, const float* labels, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(BceWithLogits(logits[i], labels[i]));
  return sum;
}

void SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale, float* dlogits) {
  for (int64_t i = 0; i < n; ++i) dlogits[i] = BceWithLogitsGrad(logits[i], labels[i], scale);
}

}  // namespace tessera::kernels
