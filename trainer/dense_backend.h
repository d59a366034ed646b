// Where the dense model computes: the memory its parameters, gradients and
// activations live in, and the operations DlrmModel and DenseOptimizer need on
// that memory. One model code runs on both implementations:
//
//   CPU   host memory, OpenBLAS (kernels/dense_ops.h); every call completes
//         before it returns. The reference: the CPU tests run the model on it.
//   CUDA  device memory of one GPU, cuBLAS (kernels/cuda/dense_ops_cuda.h),
//         all work in order on one stream; host data in and out is staged
//         through page-locked buffers (trainer/dense_backend_cuda.cc).
//
// Pointers passed to the operations are in the backend's memory (data() of
// its arrays) unless the parameter is named host. Calls are enqueued in order;
// a call that hands data to the host (CopyToHost, GatherToHost, Synchronize)
// waits for everything enqueued before it.
// Layouts are row-major; an "ld" is a row's stride in floats.
//
// Not thread-safe: one backend per thread of computation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "kernels/dense_optimizer_math.h"

namespace tessera {

// A float array in a backend's memory.
class DenseArray {
 public:
  virtual ~DenseArray() = default;
  // Makes size() == n. Contents are unspecified afterwards (device memory is
  // reallocated, without copying, when it must grow).
  virtual Status Resize(int64_t n) = 0;
  float* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<float> span() const { return {data_, static_cast<size_t>(size_)}; }

 protected:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// A host matrix [rows x cols], contiguous: one block of columns of a wider
// backend matrix (a pooled feature of the interaction).
struct HostColumns {
  const float* data;
  int cols;
};
struct MutableHostColumns {
  float* data;
  int cols;
};

class DenseBackend {
 public:
  virtual ~DenseBackend() = default;
  // "cpu", "cuda:N": for logs.
  virtual std::string name() const = 0;
  // Whether arrays are device memory (not readable on the host).
  virtual bool on_device() const = 0;

  virtual std::unique_ptr<DenseArray> NewArray() = 0;

  virtual Status Zero(float* x, int64_t n) = 0;
  virtual Status CopyFromHost(const float* host, int64_t n, float* dst) = 0;
  // Waits: host[0, n) holds the values when it returns.
  virtual Status CopyToHost(const float* src, int64_t n, float* host) = 0;
  // dst[r, c] = src[r, c] for r < rows, c < cols (src and dst point at the
  // first element of the blocks).
  virtual Status CopyMatrix(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows,
                            int64_t cols) = 0;
  // Places the host blocks side by side in the columns of dst, from dst's
  // first column on: dst[r, offset_b + c] = blocks[b].data[r * cols_b + c].
  virtual Status ScatterFromHost(std::span<const HostColumns> blocks, int64_t rows, float* dst, int64_t dst_ld) = 0;
  // The inverse: splits `rows` rows of src's columns into the host blocks.
  // Waits, like CopyToHost.
  virtual Status GatherToHost(const float* src, int64_t src_ld, int64_t rows,
                              std::span<const MutableHostColumns> blocks) = 0;
  // Waits for everything enqueued.
  virtual Status Synchronize() = 0;

  // kernels/dense_ops.h's operations, same contracts.
  virtual Status LinearForward(const float* x, const float* W, const float* b, int64_t batch, int in, int out,
                               float* y) = 0;
  virtual Status LinearBackward(const float* x, const float* W, const float* dy, int64_t batch, int in, int out,
                                float* dW, float* db, float* dx) = 0;
  virtual Status ReluForward(float* x, int64_t n) = 0;
  virtual Status ReluBackward(const float* y, float* dy, int64_t n) = 0;
  // Sum of BCE-with-logits over the n elements, in double. Read it with
  // LossSum() once a call that waits has returned: on a device the sum comes
  // back with the step's other results, at no extra wait.
  virtual Status SigmoidBceLossSum(const float* logits, const float* labels, int64_t n) = 0;
  // The sum of the latest SigmoidBceLossSum. REQUIRES: a wait since that call.
  virtual double LossSum() const = 0;
  virtual Status SigmoidBceBackward(const float* logits, const float* labels, int64_t n, float scale,
                                    float* dlogits) = 0;

  // One optimizer step over n parameters (kernels/dense_optimizer_math.h):
  // state holds DenseOptimizerStateSize(args.kind, n) floats.
  virtual Status DenseOptimizerStep(const kernels::DenseStepArgs& args, float* params, const float* grads,
                                    float* state, int64_t n) = 0;
};

std::unique_ptr<DenseBackend> NewCpuDenseBackend();

// device < 0: the CPU backend. device N >= 0: CUDA device N, which becomes
// the calling thread's current device (the optimizer and the collective then
// use it too). Call a CUDA backend only from the thread that created it: it
// does not name its device again, so on another thread its allocations and
// launches would go to that thread's current device. Unavailable in a build
// without CUDA or when the device cannot be used.
StatusOr<std::unique_ptr<DenseBackend>> NewDenseBackend(int device);

}  // namespace tessera
