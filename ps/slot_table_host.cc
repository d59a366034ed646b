// The host SlotTable: the reference the CUDA one is tested against, and the
// GPU tier's stand-in on machines without a GPU.
#include <cstring>
#include <vector>

#include "kernels/sparse_optimizer.h"
#include "ps/slot_table.h"

namespace tessera {
namespace {

class HostSlotTable final : public SlotTable {
 public:
  HostSlotTable(int64_t capacity, int row_width)
      : SlotTable(capacity, row_width), slots_(static_cast<size_t>(capacity) * row_width) {}

  std::string where() const override { return "host"; }

  Status Upload(std::span<const int32_t> slots, const float* rows) override {
    const size_t w = static_cast<size_t>(row_width());
    for (size_t i = 0; i < slots.size(); ++i) std::memcpy(Row(slots[i]), rows + i * w, w * sizeof(float));
    return Status::OK();
  }

  Status Download(std::span<const int32_t> slots, float* rows) override {
    const size_t w = static_cast<size_t>(row_width());
    for (size_t i = 0; i < slots.size(); ++i) std::memcpy(rows + i * w, Row(slots[i]), w * sizeof(float));
    return Status::OK();
  }

  Status Forward(const SlotBags& bags, int dim, float* out) override {
    kernels::EmbeddingBagForwardArgs<int32_t> a;
    a.rows = slots_.data();
    a.num_rows = capacity();
    a.row_stride = row_width();
    a.dim = dim;
    a.indices = bags.index;
    a.offsets = bags.offsets;
    a.num_bags = bags.num_bags;
    a.weights = bags.weights;
    a.pooling = bags.pooling;
    a.out = out;
    kernels::EmbeddingBagForwardCpu(a);
    return Status::OK();
  }

  Status Backward(const SlotBags& bags, int dim, const float* grad_out, int64_t num_rows, float* grad_rows) override {
    kernels::EmbeddingBagBackwardArgs<int32_t> a;
    a.grad_out = grad_out;
    a.dim = dim;
    a.indices = bags.index;
    a.offsets = bags.offsets;
    a.num_bags = bags.num_bags;
    a.weights = bags.weights;
    a.pooling = bags.pooling;
    a.num_rows = num_rows;
    a.grad_rows = grad_rows;
    kernels::EmbeddingBagBackwardCpu(a);
    return Status::OK();
  }

  Status ApplyOptimizer(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int32_t> slots,
                        const float* grads) override {
    ptrs_.resize(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) ptrs_[i] = Row(slots[i]);
    kernels::ApplySparseOptimizerCpu(config, dim, ptrs_.data(), grads, static_cast<int64_t>(slots.size()));
    return Status::OK();
  }

 private:
  float* Row(int32_t slot) { return slots_.data() + static_cast<size_t>(slot) * row_width(); }

  std::vector<float> slots_;
  std::vector<float*> ptrs_;
};

}  // namespace

std::unique_ptr<SlotTable> NewHostSlotTable(int64_t capacity, int row_width) {
  return std::make_unique<HostSlotTable>(capacity, row_width);
}

}  // namespace tessera
