// The CUDA backend: device arrays, cuBLAS through DenseOpsCuda, one stream.
//
// Host data goes in through a page-locked upload area used as a bump
// allocator: each upload takes the next free part, so a step's uploads
// (dense features, labels, pooled embeddings) are all in flight at once
// without waiting; the area is reused from its start after every wait, when
// no copy from it can be pending, and grows (after a wait) when a step needs
// more. Data goes out through a page-locked download buffer, and every
// download waits; the loss sum comes back the same way, in its own slot.
#include "trainer/dense_backend_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <glog/logging.h>

#include "kernels/cuda/dense_ops_cuda.h"
#include "kernels/cuda/dense_optimizer_cuda.h"
#include "kernels/cuda/device_cuda.h"

namespace tessera {
namespace {

using kernels::DeviceBuffer;
using kernels::FromCuda;
using kernels::PinnedBuffer;

class CudaArray final : public DenseArray {
 public:
  Status Resize(int64_t n) override {
    TESSERA_RETURN_IF_ERROR(buffer_.Reserve(static_cast<size_t>(n) * sizeof(float)));
    data_ = buffer_.as<float>();
    size_ = n;
    return Status::OK();
  }

 private:
  DeviceBuffer buffer_;
};

// Uploads start on this alignment in the staging area (a 16-byte multiple
// keeps copies on the fast path).
constexpr size_t kUploadAlign = 64;

class CudaDenseBackend final : public DenseBackend {
 public:
  static StatusOr<std::unique_ptr<DenseBackend>> Create(int device) {
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"));
    std::unique_ptr<CudaDenseBackend> b(new CudaDenseBackend(device));
    TESSERA_RETURN_IF_ERROR(
        FromCuda(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    TESSERA_ASSIGN_OR_RETURN(b->ops_, kernels::DenseOpsCuda::Create(b->stream_));
    TESSERA_ASSIGN_OR_RETURN(b->loss_, DeviceBuffer::Allocate(sizeof(double)));
    TESSERA_ASSIGN_OR_RETURN(b->loss_host_, PinnedBuffer::Allocate(sizeof(double)));
    return std::unique_ptr<DenseBackend>(std::move(b));
  }

  ~CudaDenseBackend() override {
    if (stream_ == nullptr) return;
    const Status s = FromCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    LOG_IF(WARNING, !s.ok()) << "dense backend: " << s;
    ops_.reset();  // its cuBLAS handle uses the stream
    const Status d = FromCuda(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    LOG_IF(WARNING, !d.ok()) << "dense backend: " << d;
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  bool on_device() const override { return true; }
  std::unique_ptr<DenseArray> NewArray() override { return std::make_unique<CudaArray>(); }

  Status Zero(float* x, int64_t n) override {
    if (n <= 0) return Status::OK();
    return FromCuda(cudaMemsetAsync(x, 0, sizeof(float) * n, stream_), "dense backend: zero");
  }

  Status CopyFromHost(const float* host, int64_t n, float* dst) override {
    if (n <= 0) return Status::OK();
    TESSERA_ASSIGN_OR_RETURN(float* staged, StageUpload(n));
    std::memcpy(staged, host, sizeof(float) * n);
    return FromCuda(cudaMemcpyAsync(dst, staged, sizeof(float) * n, cudaMemcpyHostToDevice, stream_),
                    "dense backend: upload");
  }

  Status CopyToHost(const float* src, int64_t n, float* host) override {
    if (n <= 0) return Synchronize();
    TESSERA_RETURN_IF_ERROR(ReserveDownload(n));
    TESSERA_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(download_.data(), src, sizeof(float) * n, cudaMemcpyDeviceToHost, stream_),
        "dense backend: download"));
    TESSERA_RETURN_IF_ERROR(Synchronize());
    std::memcpy(host, download_.data(), sizeof(float) * n);
    return Status::OK();
  }

  Status CopyMatrix(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows,
                    int64_t cols) override {
    if (rows <= 0 || cols <= 0) return Status::OK();
    return FromCuda(cudaMemcpy2DAsync(dst, sizeof(float) * dst_ld, src, sizeof(float) * src_ld, sizeof(float) * cols,
                                      rows, cudaMemcpyDeviceToDevice, stream_),
                    "dense backend: copy columns");
  }

  Status ScatterFromHost(std::span<const HostColumns> blocks, int64_t rows, float* dst, int64_t dst_ld) override {
    int64_t width = 0;
    for (const HostColumns& b : blocks) width += b.cols;
    if (rows <= 0 || width == 0) return Status::OK();
    // Side by side in page-locked memory first, then one strided copy.
    TESSERA_ASSIGN_OR_RETURN(float* staged, StageUpload(rows * width));
    for (int64_t r = 0; r < rows; ++r) {
      float* out = staged + r * width;
      for (const HostColumns& b : blocks) {
        std::memcpy(out, b.data + r * b.cols, sizeof(float) * b.cols);
        out += b.cols;
      }
    }
    return FromCuda(cudaMemcpy2DAsync(dst, sizeof(float) * dst_ld, staged, sizeof(float) * width,
                                      sizeof(float) * width, rows, cudaMemcpyHostToDevice, stream_),
                    "dense backend: upload columns");
  }

  Status GatherToHost(const float* src, int64_t src_ld, int64_t rows,
                      std::span<const MutableHostColumns> blocks) override {
    int64_t width = 0;
    for (const MutableHostColumns& b : blocks) width += b.cols;
    if (rows <= 0 || width == 0) return Synchronize();
    TESSERA_RETURN_IF_ERROR(ReserveDownload(rows * width));
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaMemcpy2DAsync(download_.data(), sizeof(float) * width, src,
                                                       sizeof(float) * src_ld, sizeof(float) * width, rows,
                                                       cudaMemcpyDeviceToHost, stream_),
                                     "dense backend: download columns"));
    TESSERA_RETURN_IF_ERROR(Synchronize());
    const float* staged = download_.as<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = staged + r * width;
      for (const MutableHostColumns& b : blocks) {
        std::memcpy(b.data + r * b.cols, in, sizeof(float) * b.cols);
        in += b.cols;
      }
    }
    return Status::OK();
  }

  Status Synchronize() override {
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(stream_), "dense backend: cudaStreamSynchronize"));
    upload_used_ = 0;
    return Status::OK();
  }

  Status LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out,
                       float* y) override {
    return ops_->LinearForward(x, W, b, batch, in, out, y);
  }
  Status LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out, float* dW,
                        float* db, float* dx) override {
    return ops_->LinearBackward(x, W, dy, batch, in, out, dW, db, dx);
  }
  Status ReluForward(float* x, int64_t n) override { return ops_->ReluForward(x, n); }
  Status ReluBackward(const float* y, float* dy, int64_t n) override { return ops_->ReluBackward(y, dy, n); }

  Status SigmoidBceLossSum(const float* logits, const float* labels, int64_t n) override {
    TESSERA_RETURN_IF_ERROR(ops_->SigmoidBceLossSum(logits, labels, n, loss_.as<double>()));
    // Lands in page-locked memory with the step's other downloads.
    return FromCuda(
        cudaMemcpyAsync(loss_host_.data(), loss_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream_),
        "dense backend: download loss");
  }
  double LossSum() const override { return *loss_host_.as<double>(); }
  Status SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale,
                            float* dlogits) override {
    return ops_->SigmoidBceBackward(logits, labels, n, scale, dlogits);
  }

  Status DenseOptimizerStep(const kernels::DenseStepArgs& args, float* params, const float* grads, float* state,
                            int64_t n) override {
    return kernels::DenseOptimizerStepCuda(args, params, grads, state, n, stream_);
  }

 private:
  explicit CudaDenseBackend(int device) : device_(device) {}

  // The next `n` floats of the upload area.
  StatusOr<float*> StageUpload(int64_t n) {
    const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + kUploadAlign - 1) / kUploadAlign * kUploadAlign;
    if (upload_used_ + bytes > upload_.size()) {
      // Copies from the area may be in flight: wait before reusing or freeing it.
      TESSERA_RETURN_IF_ERROR(Synchronize());
      if (bytes > upload_.size()) {
        upload_ = PinnedBuffer();
        TESSERA_ASSIGN_OR_RETURN(upload_, PinnedBuffer::Allocate(std::max(bytes, 2 * upload_capacity_)));
        upload_capacity_ = upload_.size();
      }
    }
    float* out = reinterpret_cast<float*>(static_cast<char*>(upload_.data()) + upload_used_);
    upload_used_ += bytes;
    return out;
  }

  // Downloads wait before returning, so the buffer is never in use here.
  Status ReserveDownload(int64_t n) {
    return download_.Reserve(static_cast<size_t>(n) * sizeof(float));
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::DenseOpsCuda> ops_;
  PinnedBuffer upload_;
  size_t upload_used_ = 0, upload_capacity_ = 0;
  PinnedBuffer download_;
  DeviceBuffer loss_;
  PinnedBuffer loss_host_;  // the latest loss sum, valid after a wait
};

}  // namespace

StatusOr<std::unique_ptr<DenseBackend>> NewCudaDenseBackend(int device) {
  auto backend = CudaDenseBackend::Create(device);
  if (!backend.ok()) return backend.status().WithContext("GPU dense backend on cuda:" + std::to_string(device));
  return backend;
}

}  // namespace tessera
