// EmbeddingShard: one shard of one table on this server — its rows (in a
// RowStore), its optimizer, and the arithmetic of a lookup and of a gradient
// push for it, run on the GPU where the store is a GPU tier
// (ps/device_row_store.h) and on the CPU otherwise. No sockets, no threads of its own: ps_service.h drives it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "kernels/dedup.h"
#include "kernels/embedding_bag.h"
#include "kernels/row_init.h"
#include "kernels/sparse_optimizer.h"
#include "ps/row_store.h"

namespace tessera {

// What a lookup leaves behind for the backward pass of one request entry.
struct ForwardContextEntry {
  uint32_t shard = 0;
  int64_t num_bags = 0;                // pooled: the non-empty bags only
  int64_t out_rows = 0;                // num_bags (pooled) or number of ids (unpooled)
  kernels::Pooling pooling = kernels::Pooling::kSum;  // as applied (sum_partial turns MEAN into SUM)
  std::vector<int64_t> unique_ids;     // [U] in first-seen order
  std::vector<int32_t> inverse;        // [num_ids] into unique_ids
  std::vector<int64_t> offsets;        // [num_bags + 1]
  std::vector<float> weights;          // [num_ids] or empty
  // A rows entry (kEntryRows): unique_ids are the request's ids, the reply
  // was their rows and the push carries their row gradients as they are.
  bool rows = false;
  // Where unique_ids' rows are, when the store keeps rows in place
  // (RowStore::stable_rows): the update then skips finding them again.
  // Valid while `row_store` is the shard's store.
  const RowStore* row_store = nullptr;
  std::vector<float*> row_ptrs;  // [U] or empty
};

class EmbeddingShard {
 public:
  // REQUIRES: spec.table indexes the job's tables and `table` is that table.
  // A null factory keeps the rows in memory (MemoryRowStore).
  static StatusOr<std::unique_ptr<EmbeddingShard>> Create(const ShardSpec& spec, const TableConfig& table,
                                                          const RowStoreFactory& factory = nullptr,
                                                          double memory_share = 1.0,
                                                          const std::string& store_instance = "");

  const ShardSpec& spec() const { return spec_; }
  // A new plan numbers the same rows differently: this shard goes on under
  // `id`. REQUIRES: no request uses the shard meanwhile.
  void Relabel(uint32_t id) { spec_.shard_id = id; }
  const TableConfig& table() const { return table_; }
  int cols() const { return spec_.num_cols; }
  bool pooled() const { return pooling_ != kernels::Pooling::kNone; }
  // Rows of the reply: one per non-empty bag (pooled) or per id (unpooled).
  int64_t OutRows(int64_t non_empty_bags, int64_t num_ids) const { return pooled() ? non_empty_bags : num_ids; }
  RowStore* store() { return store_.get(); }
  // Whether Warm can bring rows up from a slower tier (RowStore::has_slower_tier).
  bool warms() const { return store_->has_slower_tier(); }
  // RowStore::Warm of the distinct `ids`, after Forward's check of them (an
  // id outside the shard: that error, nothing warmed).
  Status Warm(std::span<const int64_t> ids) {
    TESSERA_RETURN_IF_ERROR(CheckIds(ids));
    return store_->Warm(ids);
  }

  // Checks every id lies in the shard's rows and every weight is finite, then
  // deduplicates, gathers and pools. out: [OutRows x cols], overwritten;
  // pooled tables get one row per non-empty bag, in bag order.
  // sum_partial pools a MEAN table by SUM (the trainer divides by the whole
  // bag's length after adding the partials of several row shards).
  // On error nothing is written to *ctx and the store is unchanged.
  // out == nullptr builds the context only (a backup's copy of a lookup: it
  // applies the push; the primary sent the values): no row is read.
  // evaluation: no push follows (an evaluation's lookup): a row never stored
  // is read as its initial value and not created, and the pooling runs on
  // the CPU also over a GPU tier.
  Status Forward(std::span<const int32_t> lengths, std::span<const int64_t> ids, std::span<const float> weights,
                 bool sum_partial, kernels::IdDeduper* dedup, ForwardContextEntry* ctx, float* out,
                 bool evaluation = false);

  // A rows entry's lookup: checks the ids lie in the shard and are distinct,
  // then copies each id's row to out [ids x cols] (out == nullptr: the
  // context only). The trainer pools. Same contract as Forward otherwise.
  Status ForwardRows(std::span<const int64_t> ids, kernels::IdDeduper* dedup, ForwardContextEntry* ctx, float* out,
                     bool evaluation = false);

  // Row gradients of the context's unique ids: grad_out [out_rows x cols] ->
  // grad_rows [U x cols]. Fails only where the GPU tier does (a device error).
  Status Backward(const ForwardContextEntry& ctx, const float* grad_out, float* grad_rows) const;

  // Applies the optimizer once to each of the distinct `ids`. `rows`, when
  // given, are their rows as a lookup of `from` found them (see
  // ForwardContextEntry::row_ptrs): used when `from` is still this shard's
  // store, which keeps rows in place.
  Status Apply(std::span<const int64_t> ids, const float* grad_rows, std::span<float* const> rows = {},
               const RowStore* from = nullptr);

  // The initial full row of `id` (weights of this shard's columns + state).
  void InitRow(int64_t id, float* row) const;

  // While on, Apply remembers the ids it updates: a copy of the shard taken
  // while it trains (a backup built in the background) is made equal later
  // by copying only these rows again. Turning it on forgets what was
  // remembered.
  void TrackChanges(bool on);
  bool tracking_changes() const { return tracking_.load(std::memory_order_acquire); }
  // The ids updated since tracking was turned on that lie in [begin, end),
  // sorted, each once.
  std::vector<int64_t> ChangedIds(int64_t begin, int64_t end) const;

 private:
  EmbeddingShard(const ShardSpec& spec, const TableConfig& table) : spec_(spec), table_(table) {}
  // OUT_OF_RANGE naming the first id outside the shard's rows.
  Status CheckIds(std::span<const int64_t> ids) const;

  ShardSpec spec_;
  TableConfig table_;
  kernels::Pooling pooling_ = kernels::Pooling::kSum;
  kernels::SparseOptimizerConfig optimizer_;
  kernels::RowInitializer initializer_;
  std::unique_ptr<RowStore> store_;
  // Apply holds it shared throughout; TrackChanges exclusively, so that no
  // update that began before tracking did goes unrecorded.
  std::shared_mutex apply_mu_;
  std::atomic<bool> tracking_{false};
  mutable std::mutex changed_mu_;
  std::vector<int64_t> changed_;  // GUARDED_BY(changed_mu_): in update order, repeats included
};

}  // namespace tessera
