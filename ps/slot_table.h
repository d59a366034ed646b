// SlotTable: the rows of one shard's GPU tier — a fixed number of row slots in
// one device's memory — and the shard's arithmetic run where those rows are
// (pooling, gradient reduction, the fused optimizer). DeviceRowStore decides
// which row lives in which slot; a SlotTable only moves rows in and out of
// slots and computes on them.
//
// Two implementations with one contract: CUDA (slots in GPU memory, the
// kernels of kernels/cuda/) and host (slots in a host array, the CPU kernels).
// The host one is what the GPU tier's tests run on a machine without a GPU:
// every decision of the tier (index, eviction, write-back, fetch) is then
// exercised, and only the copies and launches of the CUDA table are not. Both
// run the same per-element arithmetic (kernels/*_math.h).
//
// Inputs and outputs are host memory: they come from and go to ZeroMQ
// messages. The CUDA table copies them in one batch per call.
//
// Not thread-safe: the owning store serializes calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "kernels/embedding_bag.h"
#include "kernels/sparse_optimizer.h"

namespace tessera {

// Bags over rows: ids [offsets[b], offsets[b+1]) belong to bag b, and id i
// reads row index[i] (a slot in Forward, a position in the unique rows in
// Backward). Pooled (kSum, kMean): one output row per bag; kNone: one per id.
struct SlotBags {
  const int32_t* index = nullptr;   // [num_ids]
  int64_t num_ids = 0;
  const int64_t* offsets = nullptr; // [num_bags + 1], offsets[num_bags] == num_ids
  int64_t num_bags = 0;
  const float* weights = nullptr;   // [num_ids] or null
  kernels::Pooling pooling = kernels::Pooling::kSum;

  int64_t OutRows() const { return pooling == kernels::Pooling::kNone ? num_ids : num_bags; }
};

class SlotTable {
 public:
  virtual ~SlotTable() = default;

  int64_t capacity() const { return capacity_; }
  int row_width() const { return row_width_; }
  // Where the slots are, for logs and stats: "cuda:0", "host".
  virtual std::string where() const = 0;

  // Writes rows [slots.size() x row_width] (host) into the slots. Slots distinct.
  virtual Status Upload(std::span<const int32_t> slots, const float* rows) = 0;
  // Copies the slots' rows out to rows [slots.size() x row_width] (host).
  virtual Status Download(std::span<const int32_t> slots, float* rows) = 0;

  // out [bags.OutRows() x dim] (host) = the bags pooled from the first dim
  // floats of the rows in the slots bags.index names.
  virtual Status Forward(const SlotBags& bags, int dim, float* out) = 0;

  // grad_rows [num_rows x dim] (host) = the gradient of each of num_rows rows
  // from grad_out [bags.OutRows() x dim] (host); bags.index holds positions in
  // [0, num_rows). Touches no slot.
  virtual Status Backward(const SlotBags& bags, int dim, const float* grad_out, int64_t num_rows,
                          float* grad_rows) = 0;

  // One optimizer step on each of the rows in `slots` (distinct) with
  // grads [slots.size() x dim] (host), in place.
  virtual Status ApplyOptimizer(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int32_t> slots,
                                const float* grads) = 0;

 protected:
  SlotTable(int64_t capacity, int row_width) : capacity_(capacity), row_width_(row_width) {}

 private:
  int64_t capacity_;
  int row_width_;
};

// Slots in a host array, computed on by the CPU kernels.
std::unique_ptr<SlotTable> NewHostSlotTable(int64_t capacity, int row_width);

// Slots in the memory of CUDA device `device`, computed on by the CUDA kernels
// on a stream of its own. ResourceExhausted when the device lacks the memory;
// Unavailable in a build without CUDA or without a usable device.
StatusOr<std::unique_ptr<SlotTable>> NewCudaSlotTable(int device, int64_t capacity, int row_width);

}  // namespace tessera
