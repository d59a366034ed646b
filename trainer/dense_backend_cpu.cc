// The CPU backend: host memory, the CPU dense kernels, the optimizer loop.
// The reference the CUDA backend is compared with.
#include <cstring>
#include <vector>

#include "kernels/dense_ops.h"
#include "trainer/dense_backend.h"

namespace tessera {
namespace {

class CpuArray final : public DenseArray {
 public:
  Status Resize(int64_t n) override {
    values_.resize(static_cast<size_t>(n));
    data_ = values_.data();
    size_ = n;
    return Status::OK();
  }

 private:
  std::vector<float> values_;
};

class CpuDenseBackend final : public DenseBackend {
 public:
  std::string name() const override { return "cpu"; }
  bool on_device() const override { return false; }
  std::unique_ptr<DenseArray> NewArray() override { return std::make_unique<CpuArray>(); }

  Status Zero(float* x, int64_t n) override {
    if (n > 0) std::memset(x, 0, sizeof(float) * n);
    return Status::OK();
  }
  Status CopyFromHost(const float* host, int64_t n, float* dst) override {
    if (n > 0) std::memcpy(dst, host, sizeof(float) * n);
    return Status::OK();
  }
  Status CopyToHost(const float* src, int64_t n, float* host) override { return CopyFromHost(src, n, host); }
  Status CopyMatrix(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows,
                    int64_t cols) override {
    // A model without dense features has no columns here, and no buffer
    // either (memcpy of a null pointer is undefined, even of 0 bytes).
    if (cols <= 0) return Status::OK();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, sizeof(float) * cols);
    return Status::OK();
  }
  Status ScatterFromHost(std::span<const HostColumns> blocks, int64_t rows, float* dst, int64_t dst_ld) override {
    for (int64_t r = 0; r < rows; ++r) {
      float* out = dst + r * dst_ld;
      for (const HostColumns& b : blocks) {
        std::memcpy(out, b.data + r * b.cols, sizeof(float) * b.cols);
        out += b.cols;
      }
    }
    return Status::OK();
  }
  Status GatherToHost(const float* src, int64_t src_ld, int64_t rows,
                      std::span<const MutableHostColumns> blocks) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = src + r * src_ld;
      for (const MutableHostColumns& b : blocks) {
        std::memcpy(b.data + r * b.cols, in, sizeof(float) * b.cols);
        in += b.cols;
      }
    }
    return Status::OK();
  }
  Status Synchronize() override { return Status::OK(); }

  Status LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out,
                       float* y) override {
    kernels::LinearForward(x, W, b, batch, in, out, y);
    return Status::OK();
  }
  Status LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out, float* dW,
                        float* db, float* dx) override {
    kernels::LinearBackward(x, W, dy, batch, in, out, dW, db, dx);
    return Status::OK();
  }
  Status ReluForward(float* x, int64_t n) override {
    kernels::ReluForward(x, n);
    return Status::OK();
  }
  Status ReluBackward(const float* y, float* dy, int64_t n) override {
    kernels::ReluBackward(y, dy, n);
    return Status::OK();
  }
  Status SigmoidBceLossSum(const float* logits, const float* labels, int64_t n) override {
    loss_sum_ = kernels::SigmoidBceLossSum(logits, labels, n);
    return Status::OK();
  }
  double LossSum() const override { return loss_sum_; }
  Status SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale,
                            float* dlogits) override {
    kernels::SigmoidBceBackward(logits, labels, n, scale, dlogits);
    return Status::OK();
  }

  Status DenseOptimizerStep(const kernels::DenseStepArgs& a, float* params, const float* grads, float* state,
                            int64_t n) override {
    // The kind is chosen outside the loops so each loop stays branch-free.
    switch (a.kind) {
      case kernels::DenseOptimizerKind::kSgd:
        for (int64_t i = 0; i < n; ++i) kernels::DenseSgdElement(a, &params[i], grads[i]);
        break;
      case kernels::DenseOptimizerKind::kAdagrad:
        for (int64_t i = 0; i < n; ++i) kernels::DenseAdagradElement(a, &params[i], &state[i], grads[i]);
        break;
      case kernels::DenseOptimizerKind::kAdam:
        for (int64_t i = 0; i < n; ++i) kernels::DenseAdamElement(a, &params[i], &state[i], &state[n + i], grads[i]);
        break;
    }
    return Status::OK();
  }

 private:
  double loss_sum_ = 0;
};

}  // namespace

std::unique_ptr<DenseBackend> NewCpuDenseBackend() { return std::make_unique<CpuDenseBackend>(); }

}  // namespace tessera
