// The CUDA SlotTable: slots in one cudaMalloc'd array, a stream of its own.
// Every call copies its host inputs to device scratch buffers (grown as
// needed, kept for the next call), launches, copies the result back and
// waits, so a call returns with its outputs on the host like the host table.
#include "ps/slot_table.h"

#if defined(TESSERA_HAVE_CUDA)

#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/embedding_bag_cuda.h"
#include "kernels/cuda/row_slots_cuda.h"
#include "kernels/cuda/sparse_optimizer_cuda.h"

namespace tessera {
namespace {

using kernels::DeviceBuffer;
using kernels::FromCuda;

class CudaSlotTable final : public SlotTable {
 public:
  CudaSlotTable(int device, int64_t capacity, int row_width) : SlotTable(capacity, row_width), device_(device) {}

  ~CudaSlotTable() override {
    if (stream_ != nullptr) {
      (void)cudaSetDevice(device_);
      (void)cudaStreamDestroy(stream_);
    }
  }

  Status Init() {
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "cudaSetDevice"));
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    const size_t bytes = static_cast<size_t>(capacity()) * row_width() * sizeof(float);
    auto table = DeviceBuffer::Allocate(bytes);
    if (!table.ok()) return table.status().WithContext("GPU tier of " + std::to_string(bytes) + " bytes");
    table_ = std::move(table).value();
    return Status::OK();
  }

  std::string where() const override { return "cuda:" + std::to_string(device_); }

  Status Upload(std::span<const int32_t> slots, const float* rows) override {
    if (slots.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const int64_t n = static_cast<int64_t>(slots.size());
    TESSERA_ASSIGN_OR_RETURN(const int32_t* d_slots, In(&slots_, slots.data(), slots.size()));
    TESSERA_ASSIGN_OR_RETURN(const float* d_rows, In(&packed_, rows, RowFloats(n)));
    TESSERA_RETURN_IF_ERROR(kernels::ScatterRowsCuda(Table(), row_width(), d_slots, n, d_rows, stream_));
    return Wait("upload");
  }

  Status Download(std::span<const int32_t> slots, float* rows) override {
    if (slots.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const int64_t n = static_cast<int64_t>(slots.size());
    TESSERA_ASSIGN_OR_RETURN(const int32_t* d_slots, In(&slots_, slots.data(), slots.size()));
    TESSERA_RETURN_IF_ERROR(packed_.Reserve(RowFloats(n) * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(kernels::GatherRowsCuda(Table(), row_width(), d_slots, n, packed_.as<float>(), stream_));
    TESSERA_RETURN_IF_ERROR(Out(rows, packed_, RowFloats(n)));
    return Wait("download");
  }

  Status Forward(const SlotBags& bags, int dim, float* out) override {
    const size_t out_floats = static_cast<size_t>(bags.OutRows()) * dim;
    if (out_floats == 0) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    kernels::EmbeddingBagForwardArgs<int32_t> a;
    TESSERA_RETURN_IF_ERROR(BagsIn(bags, &a.indices, &a.offsets, &a.weights));
    TESSERA_RETURN_IF_ERROR(out_.Reserve(out_floats * sizeof(float)));
    a.rows = Table();
    a.num_rows = capacity();
    a.row_stride = row_width();
    a.dim = dim;
    a.num_bags = bags.num_bags;
    a.pooling = bags.pooling;
    a.out = out_.as<float>();
    TESSERA_RETURN_IF_ERROR(kernels::EmbeddingBagForwardCuda(a, stream_));
    TESSERA_RETURN_IF_ERROR(Out(out, out_, out_floats));
    return Wait("forward");
  }

  Status Backward(const SlotBags& bags, int dim, const float* grad_out, int64_t num_rows, float* grad_rows) override {
    const size_t row_floats = static_cast<size_t>(num_rows) * dim;
    if (row_floats == 0) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    kernels::EmbeddingBagBackwardArgs<int32_t> a;
    TESSERA_RETURN_IF_ERROR(BagsIn(bags, &a.indices, &a.offsets, &a.weights));
    TESSERA_ASSIGN_OR_RETURN(a.grad_out, In(&out_, grad_out, static_cast<size_t>(bags.OutRows()) * dim));
    TESSERA_RETURN_IF_ERROR(grads_.Reserve(row_floats * sizeof(float)));
    a.dim = dim;
    a.num_bags = bags.num_bags;
    a.pooling = bags.pooling;
    a.num_rows = num_rows;
    a.grad_rows = grads_.as<float>();
    TESSERA_RETURN_IF_ERROR(kernels::EmbeddingBagBackwardCuda(a, bags.num_ids, &backward_scratch_, stream_));
    TESSERA_RETURN_IF_ERROR(Out(grad_rows, grads_, row_floats));
    return Wait("backward");
  }

  Status ApplyOptimizer(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int32_t> slots,
                        const float* grads) override {
    if (slots.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const int64_t n = static_cast<int64_t>(slots.size());
    // The optimizer kernel takes 64-bit row numbers.
    wide_slots_.assign(slots.begin(), slots.end());
    TESSERA_ASSIGN_OR_RETURN(const int64_t* d_rows, In(&wide_, wide_slots_.data(), wide_slots_.size()));
    TESSERA_ASSIGN_OR_RETURN(const float* d_grads, In(&grads_, grads, static_cast<size_t>(n) * dim));
    TESSERA_RETURN_IF_ERROR(
        kernels::ApplySparseOptimizerToTableCuda(config, dim, Table(), row_width(), d_rows, d_grads, n, stream_));
    return Wait("optimizer");
  }

 private:
  float* Table() const { return table_.as<float>(); }
  size_t RowFloats(int64_t n) const { return static_cast<size_t>(n) * row_width(); }

  // Calls come from the server's worker threads, each with its own current
  // device: name ours every time (cheap when it is already current).
  Status Begin() { return FromCuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"); }

  template <typename T>
  StatusOr<const T*> In(DeviceBuffer* buffer, const T* host, size_t count) {
    if (count == 0) return static_cast<const T*>(nullptr);
    TESSERA_RETURN_IF_ERROR(buffer->Reserve(count * sizeof(T)));
    TESSERA_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(buffer->data(), host, count * sizeof(T), cudaMemcpyHostToDevice, stream_), "copy to GPU"));
    return buffer->as<const T>();
  }

  Status Out(float* host, const DeviceBuffer& from, size_t count) {
    return FromCuda(cudaMemcpyAsync(host, from.data(), count * sizeof(float), cudaMemcpyDeviceToHost, stream_),
                    "copy from GPU");
  }

  Status BagsIn(const SlotBags& bags, const int32_t** index, const int64_t** offsets, const float** weights) {
    TESSERA_ASSIGN_OR_RETURN(*index, In(&index_, bags.index, static_cast<size_t>(bags.num_ids)));
    TESSERA_ASSIGN_OR_RETURN(*offsets, In(&offsets_, bags.offsets, static_cast<size_t>(bags.num_bags) + 1));
    *weights = nullptr;
    if (bags.weights != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(*weights, In(&weights_, bags.weights, static_cast<size_t>(bags.num_ids)));
    }
    return Status::OK();
  }

  // Host buffers passed to the copies must outlive them: wait before returning.
  Status Wait(const char* what) {
    return FromCuda(cudaStreamSynchronize(stream_), std::string("GPU tier ") + what);
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer table_;
  DeviceBuffer slots_, packed_, index_, offsets_, weights_, out_, grads_, wide_, backward_scratch_;
  std::vector<int64_t> wide_slots_;
};

}  // namespace

StatusOr<std::unique_ptr<SlotTable>> NewCudaSlotTable(int device, int64_t capacity, int row_width) {
  if (capacity < 1 || row_width < 1) return Status::InvalidArgument("GPU tier: capacity and row width must be >= 1");
  auto t = std::make_unique<CudaSlotTable>(device, capacity, row_width);
  TESSERA_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<SlotTable>(std::move(t));
}

}  // namespace tessera

#else  // !TESSERA_HAVE_CUDA

namespace tessera {

StatusOr<std::unique_ptr<SlotTable>> NewCudaSlotTable(int device, int64_t, int) {
  return Status::Unavailable("GPU tier on cuda:" + std::to_string(device) + ": this build has no CUDA");
}

}  // namespace tessera

#endif
