// The CUDA SlotTable: slots in one cudaMalloc'd array, a stream of its own.
// A call packs all its host inputs into one page-locked buffer and sends them
// in one copy, launches, brings its result back through a second page-locked
// buffer and waits, so it returns with its outputs on the host like the host
// table. One copy each way, from page-locked memory, because the inputs are
// small (a request's ids, offsets, weights, gradients) and a copy's fixed
// cost would otherwise dominate; and a copy from pageable memory goes through
// the driver's own bounce buffer in pieces, at a fraction of the link's speed.
#include "ps/slot_table.h"

#if defined(TESSERA_HAVE_CUDA)

#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <vector>

#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/embedding_bag_cuda.h"
#include "kernels/cuda/row_slots_cuda.h"
#include "kernels/cuda/sparse_optimizer_cuda.h"

namespace tessera {
namespace {

using kernels::DeviceBuffer;
using kernels::FromCuda;
using kernels::PinnedBuffer;

// One host input of a call: where it is and how many bytes.
struct HostInput {
  const void* data = nullptr;
  size_t bytes = 0;
};

template <typename T>
HostInput Input(const T* data, size_t count) {
  return {data, data == nullptr ? 0 : count * sizeof(T)};
}

// Where a packed input landed on the device; null for an empty input.
template <typename T>
const T* At(const char* device) {
  return reinterpret_cast<const T*>(device);
}

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
    TESSERA_ASSIGN_OR_RETURN(auto in, In<2>({Input(slots.data(), slots.size()), Input(rows, RowFloats(n))}));
    TESSERA_RETURN_IF_ERROR(
        kernels::ScatterRowsCuda(Table(), row_width(), At<int32_t>(in[0]), n, At<float>(in[1]), stream_));
    return Finish("upload");
  }

  Status Download(std::span<const int32_t> slots, float* rows) override {
    if (slots.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const int64_t n = static_cast<int64_t>(slots.size());
    TESSERA_ASSIGN_OR_RETURN(auto in, In<1>({Input(slots.data(), slots.size())}));
    TESSERA_RETURN_IF_ERROR(result_.Reserve(RowFloats(n) * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(
        kernels::GatherRowsCuda(Table(), row_width(), At<int32_t>(in[0]), n, result_.as<float>(), stream_));
    return Finish("download", rows, RowFloats(n));
  }

  Status Forward(const SlotBags& bags, int dim, float* out) override {
    const size_t out_floats = static_cast<size_t>(bags.OutRows()) * dim;
    if (out_floats == 0) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    TESSERA_ASSIGN_OR_RETURN(auto in, In<3>(BagInputs(bags)));
    TESSERA_RETURN_IF_ERROR(result_.Reserve(out_floats * sizeof(float)));
    kernels::EmbeddingBagForwardArgs<int32_t> a;
    a.indices = At<int32_t>(in[0]);
    a.offsets = At<int64_t>(in[1]);
    a.weights = At<float>(in[2]);
    a.rows = Table();
    a.num_rows = capacity();
    a.row_stride = row_width();
    a.dim = dim;
    a.num_bags = bags.num_bags;
    a.pooling = bags.pooling;
    a.out = result_.as<float>();
    TESSERA_RETURN_IF_ERROR(kernels::EmbeddingBagForwardCuda(a, stream_));
    return Finish("forward", out, out_floats);
  }

  Status Backward(const SlotBags& bags, int dim, const float* grad_out, int64_t num_rows, float* grad_rows) override {
    const size_t row_floats = static_cast<size_t>(num_rows) * dim;
    if (row_floats == 0) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const std::array<HostInput, 3> b = BagInputs(bags);
    TESSERA_ASSIGN_OR_RETURN(
        auto in, In<4>({b[0], b[1], b[2], Input(grad_out, static_cast<size_t>(bags.OutRows()) * dim)}));
    TESSERA_RETURN_IF_ERROR(result_.Reserve(row_floats * sizeof(float)));
    kernels::EmbeddingBagBackwardArgs<int32_t> a;
    a.indices = At<int32_t>(in[0]);
    a.offsets = At<int64_t>(in[1]);
    a.weights = At<float>(in[2]);
    a.grad_out = At<float>(in[3]);
    a.dim = dim;
    a.num_bags = bags.num_bags;
    a.pooling = bags.pooling;
    a.num_rows = num_rows;
    a.grad_rows = result_.as<float>();
    TESSERA_RETURN_IF_ERROR(kernels::EmbeddingBagBackwardCuda(a, bags.num_ids, &backward_scratch_, stream_));
    return Finish("backward", grad_rows, row_floats);
  }

  Status ApplyOptimizer(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int32_t> slots,
                        const float* grads) override {
    if (slots.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(Begin());
    const int64_t n = static_cast<int64_t>(slots.size());
    // The optimizer kernel takes 64-bit row numbers.
    wide_slots_.assign(slots.begin(), slots.end());
    TESSERA_ASSIGN_OR_RETURN(auto in, In<2>({Input(wide_slots_.data(), wide_slots_.size()),
                                             Input(grads, static_cast<size_t>(n) * dim)}));
    TESSERA_RETURN_IF_ERROR(kernels::ApplySparseOptimizerToTableCuda(config, dim, Table(), row_width(),
                                                                     At<int64_t>(in[0]), At<float>(in[1]), n, stream_));
    return Finish("optimizer");
  }

 private:
  // Each input starts on a boundary this wide in the packed buffers, so every
  // one is as aligned as its own cudaMalloc would be.
  static constexpr size_t kInputAlign = 256;

  float* Table() const { return table_.as<float>(); }
  size_t RowFloats(int64_t n) const { return static_cast<size_t>(n) * row_width(); }

  // Calls come from the server's worker threads, each with its own current
  // device: name ours every time (cheap when it is already current).
  Status Begin() { return FromCuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"); }

  static std::array<HostInput, 3> BagInputs(const SlotBags& bags) {
    return {Input(bags.index, static_cast<size_t>(bags.num_ids)),
            Input(bags.offsets, static_cast<size_t>(bags.num_bags) + 1),
            Input(bags.weights, static_cast<size_t>(bags.num_ids))};
  }

  // Packs the inputs into the page-locked upload buffer and queues one copy
  // of them to the device; returns where each will be there (null for an
  // empty one). A call that succeeds waits for its stream before it
  // returns; one that failed between here and Finish may have left the copy
  // running, so the buffer is only touched once that copy is done
  // (cudaFreeHost, when it grows, does not wait for it).
  template <size_t N>
  StatusOr<std::array<const char*, N>> In(const std::array<HostInput, N>& inputs) {
    if (upload_in_flight_) {
      TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(stream_), "GPU tier: an earlier call's copy"));
      upload_in_flight_ = false;
    }
    std::array<size_t, N> at{};
    size_t total = 0;
    for (size_t i = 0; i < N; ++i) {
      at[i] = total;
      total += (inputs[i].bytes + kInputAlign - 1) / kInputAlign * kInputAlign;
    }
    std::array<const char*, N> device{};
    if (total == 0) return device;
    TESSERA_RETURN_IF_ERROR(upload_host_.Reserve(total));
    TESSERA_RETURN_IF_ERROR(upload_.Reserve(total));
    for (size_t i = 0; i < N; ++i) {
      if (inputs[i].bytes == 0) continue;
      std::memcpy(upload_host_.as<char>() + at[i], inputs[i].data, inputs[i].bytes);
      device[i] = upload_.as<const char>() + at[i];
    }
    TESSERA_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(upload_.data(), upload_host_.data(), total, cudaMemcpyHostToDevice, stream_), "copy to GPU"));
    upload_in_flight_ = true;
    return device;
  }

  // Waits for the call's work; with `out`, first queues the copy of the
  // first `floats` floats of result_ to the host and then hands them over.
  Status Finish(const char* what, float* out = nullptr, size_t floats = 0) {
    const size_t bytes = floats * sizeof(float);
    if (out != nullptr && bytes > 0) {
      TESSERA_RETURN_IF_ERROR(result_host_.Reserve(bytes));
      TESSERA_RETURN_IF_ERROR(FromCuda(
          cudaMemcpyAsync(result_host_.data(), result_.data(), bytes, cudaMemcpyDeviceToHost, stream_),
          "copy from GPU"));
    }
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(stream_), std::string("GPU tier ") + what));
    upload_in_flight_ = false;
    if (out != nullptr && bytes > 0) std::memcpy(out, result_host_.data(), bytes);
    return Status::OK();
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer table_;
  DeviceBuffer upload_, result_, backward_scratch_;  // per-call device scratch
  PinnedBuffer upload_host_, result_host_;           // their page-locked host sides
  bool upload_in_flight_ = false;                    // a copy from upload_host_ may be running
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
