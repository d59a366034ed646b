// The GPU tier (DESIGN.md §6): a shard's hottest rows in a fixed number of
// slots of GPU memory (a SlotTable), over the store below it — host memory,
// or host memory over RocksDB — and the shard's lookups, gradient reduction
// and optimizer run where the rows are.
//
// Which row is in which slot is kept on the host: ids arrive on the host from
// ZeroMQ and are deduplicated there already, so a request resolves its
// distinct ids to slots with host lookups and sends the device one 4-byte
// slot per id. Where the whole shard fits in the tier the index is a dense
// array (slot of id = its position in the shard, nothing is ever evicted);
// otherwise a hash map, and CLOCK (second chance) picks the rows to evict.
//
// A request's misses move as one batch: dirty victims are copied out in one
// download and written to the store below in one Put (write-back), then the
// missing rows are read from below in one Read (which initializes rows never
// stored) and copied in with one upload. A row is only evicted once it is on
// the tier below, so a failed write-back leaves it resident and dirty and the
// request fails with the error. The tier is inclusive: a resident row may also
// be below, older; ForEach and Flush write every dirty row back first, so
// checkpoints and dumps see the newest values.
//
// One request's rows never evict each other: a lookup or gradient push that
// touches more distinct rows than the tier has slots fails with
// ResourceExhausted (raise --gpu_bytes). The RowStore calls (checkpoints,
// restores) take batches of any size: larger ones go to the store below.
//
// Thread safety: as RowStore. One mutex serializes the tier's work (the
// device runs one request of a shard at a time); shards run side by side.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kernels/embedding_bag.h"
#include "kernels/sparse_optimizer.h"
#include "ps/row_store.h"
#include "ps/slot_table.h"

namespace tessera {

class DeviceRowStore final : public RowStore {
 public:
  // The shard's ids are [id_base, id_base + id_count). REQUIRES: table's
  // row_width == options.row_width; lower holds rows of that width.
  static StatusOr<std::unique_ptr<DeviceRowStore>> Create(const RowStoreOptions& options,
                                                          std::unique_ptr<SlotTable> table,
                                                          std::unique_ptr<RowStore> lower, int64_t id_base,
                                                          int64_t id_count);
  ~DeviceRowStore() override;

  // The RowStore interface, by copying rows between the tier and the host
  // (checkpoints, restores, dumps, tests): correct, not fast.
  Status Read(std::span<const int64_t> ids, const ReadFn& fn) override;
  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override;
  Status Put(std::span<const int64_t> ids, const float* rows) override;
  // Resident rows from the tier, the others from the store below, which
  // creates none; no slot is taken.
  Status GatherExisting(std::span<const int64_t> ids, float* out) override;
  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override;
  // Rows beyond the tier's slots end in the store below it.
  void Reserve(int64_t rows) override { lower_->Reserve(rows); }
  int64_t size() const override;
  RowStoreStats Stats() const override;
  Status Flush() override;
  DeviceRowStore* device_tier() override { return this; }

  // What the shard runs on the device. unique_ids: the request's distinct ids
  // (in the shard's range); inverse [num_ids]: each id's position in them.
  // out [OutRows x dim] (host).
  Status Forward(std::span<const int64_t> unique_ids, std::span<const int32_t> inverse,
                 std::span<const int64_t> offsets, const float* weights, kernels::Pooling pooling, int dim,
                 float* out);
  // grad_rows [unique x dim] from grad_out, for the ids of a Forward.
  Status Backward(std::span<const int32_t> inverse, std::span<const int64_t> offsets, const float* weights,
                  kernels::Pooling pooling, int dim, const float* grad_out, int64_t num_unique, float* grad_rows);
  // One optimizer step on each of the distinct ids.
  Status Apply(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int64_t> ids,
               const float* grad_rows);

  const SlotTable& table() const { return *table_; }
  bool dense_index() const { return !dense_slot_.empty(); }

 private:
  DeviceRowStore(const RowStoreOptions& options, std::unique_ptr<SlotTable> table, std::unique_ptr<RowStore> lower,
                 int64_t id_base, int64_t id_count);

  // slots[i] = the slot now holding ids[i] (distinct), bringing missing rows
  // in (from below when `fetch`, else leaving their slots for the caller to
  // fill) and evicting cold rows to make room. Pins the slots against
  // eviction until the next call. REQUIRES: mu_ held.
  Status Resolve(std::span<const int64_t> ids, bool fetch, std::vector<int32_t>* slots);
  int32_t Find(int64_t id) const;
  void SetIndex(int64_t id, int32_t slot);
  void EraseIndex(int64_t id);
  // Up to n slots to put new rows in: free ones first, then CLOCK victims
  // that are not pinned. Fewer only if too many are pinned.
  std::vector<int32_t> PickSlots(size_t n);
  // Writes the dirty rows among `slots` to the tier below and marks them clean.
  Status WriteBack(std::span<const int32_t> slots);
  Status WriteBackAllDirty();
  // The RowStore calls take batches of any size; those larger than the tier
  // go to the store below. REQUIRES: mu_ held.
  bool Oversized(std::span<const int64_t> ids) const {
    return static_cast<int64_t>(ids.size()) > table_->capacity();
  }
  // Frees the slots of those ids that are resident, without writing back.
  void DropResident(std::span<const int64_t> ids);

  std::unique_ptr<SlotTable> table_;
  std::unique_ptr<RowStore> lower_;
  const int64_t id_base_;
  const int64_t id_count_;

  mutable std::mutex mu_;
  // Index: dense (slot per id, -1 when absent) where the shard fits, else hashed.
  std::vector<int32_t> dense_slot_;
  std::unordered_map<int64_t, int32_t> hashed_slot_;
  // Per slot: its row's id (-1: free), and flags.
  std::vector<int64_t> slot_id_;
  std::vector<uint8_t> dirty_, referenced_, below_;
  std::vector<uint64_t> pinned_at_;
  std::vector<int32_t> free_;
  uint64_t request_ = 0;
  size_t hand_ = 0;
  int64_t resident_ = 0, resident_not_below_ = 0;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0, writebacks_ = 0;
  // Per-call scratch.
  std::vector<int32_t> slots_, slot_per_id_;
  std::vector<float> rows_;
};

}  // namespace tessera
