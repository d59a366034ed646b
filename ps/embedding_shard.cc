#include "ps/embedding_shard.h"

#include <algorithm>

#include <cmath>
#include <string>

#include "kernels/config_conversion.h"
#include "ps/device_row_store.h"

namespace tessera {

StatusOr<std::unique_ptr<EmbeddingShard>> EmbeddingShard::Create(const ShardSpec& spec, const TableConfig& table,
                                                                  const RowStoreFactory& factory,
                                                                  double memory_share,
                                                                  const std::string& store_instance) {
  if (spec.num_cols < 1 || spec.col_offset < 0 || spec.col_offset + spec.num_cols > table.embedding_dim) {
    return Status::InvalidArgument("shard " + std::to_string(spec.shard_id) + " of table " + table.name +
                                   ": columns out of the table's dimension");
  }
  if (spec.num_rows < 0 || spec.row_offset < 0 || spec.row_offset + spec.num_rows > table.num_embeddings) {
    return Status::InvalidArgument("shard " + std::to_string(spec.shard_id) + " of table " + table.name +
                                   ": rows out of the table's range");
  }
  std::unique_ptr<EmbeddingShard> s(new EmbeddingShard(spec, table));
  TESSERA_ASSIGN_OR_RETURN(s->optimizer_, kernels::ToSparseOptimizerConfig(table.optimizer));
  s->pooling_ = kernels::ToPooling(table.pooling);
  s->initializer_ = kernels::ToRowInitializer(table.initializer, table.seed);
  RowStoreOptions options;
  options.gather_cols = spec.num_cols;
  options.row_width = spec.num_cols + kernels::SparseOptimizerStateFloats(s->optimizer_.kind, spec.num_cols);
  EmbeddingShard* self = s.get();
  options.init = [self](int64_t id, float* row) { self->InitRow(id, row); };
  options.memory_share = memory_share;
  options.instance = store_instance;
  options.id_begin = spec.row_offset;
  options.id_end = spec.row_offset + spec.num_rows;
  if (factory) {
    TESSERA_ASSIGN_OR_RETURN(s->store_, factory(spec, options));
  } else {
    s->store_ = NewMemoryRowStore(options);
  }
  return s;
}

void EmbeddingShard::InitRow(int64_t id, float* row) const {
  kernels::InitRow(initializer_, id, spec_.col_offset, spec_.num_cols, row);
  kernels::InitSparseOptimizerState(optimizer_, spec_.num_cols, row + spec_.num_cols);
}

Status EmbeddingShard::CheckIds(std::span<const int64_t> ids) const {
  const int64_t lo = spec_.row_offset, hi = spec_.row_offset + spec_.num_rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < lo || ids[i] >= hi) {
      return Status::OutOfRange("id " + std::to_string(ids[i]) + " is not in shard " +
                                std::to_string(spec_.shard_id) + " of table " + table_.name + " (rows [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "))");
    }
  }
  return Status::OK();
}

Status EmbeddingShard::Forward(std::span<const int32_t> lengths, std::span<const int64_t> ids,
                               std::span<const float> weights, bool sum_partial, kernels::IdDeduper* dedup,
                               ForwardContextEntry* ctx, float* out, bool evaluation) {
  TESSERA_RETURN_IF_ERROR(CheckIds(ids));
  for (float w : weights) {
    if (!std::isfinite(w)) return Status::InvalidArgument("non-finite per-id weight for table " + table_.name);
  }
  ForwardContextEntry c;
  c.shard = spec_.shard_id;
  c.offsets.reserve(lengths.size() + 1);
  c.offsets.push_back(0);
  if (pooled()) {
    // Empty bags are left out of the reply: a row shard sees only the bags
    // with ids in its rows, and the trainer knows which those are.
    for (int32_t len : lengths) {
      if (len > 0) c.offsets.push_back(c.offsets.back() + len);
    }
  } else {
    for (int32_t len : lengths) c.offsets.push_back(c.offsets.back() + len);
  }
  c.num_bags = static_cast<int64_t>(c.offsets.size()) - 1;
  c.out_rows = OutRows(c.num_bags, static_cast<int64_t>(ids.size()));
  c.pooling = (sum_partial && pooling_ == kernels::Pooling::kMean) ? kernels::Pooling::kSum : pooling_;
  c.weights.assign(weights.begin(), weights.end());
  dedup->Run(ids, &c.unique_ids, &c.inverse);
  if (out == nullptr) {
    *ctx = std::move(c);
    return Status::OK();
  }

  if (DeviceRowStore* tier = store_->device_tier(); tier != nullptr && !evaluation) {
    // The rows are on the GPU: pooling runs there, only the output comes back.
    TESSERA_RETURN_IF_ERROR(tier->Forward(c.unique_ids, c.inverse, c.offsets,
                                          c.weights.empty() ? nullptr : c.weights.data(), c.pooling, cols(), out));
    *ctx = std::move(c);
    return Status::OK();
  }
  // Each distinct row once, pooled through the inverse index.
  kernels::EmbeddingBagForwardArgs<int32_t> args;
  args.num_rows = static_cast<int64_t>(c.unique_ids.size());
  args.row_stride = cols();
  args.dim = cols();
  args.indices = c.inverse.data();
  args.offsets = c.offsets.data();
  args.num_bags = c.num_bags;
  args.weights = c.weights.empty() ? nullptr : c.weights.data();
  args.pooling = c.pooling;
  args.out = out;
  if (evaluation) {
    // Rows never stored are read as their initial values: copied out.
    thread_local std::vector<float> gathered;
    gathered.resize(c.unique_ids.size() * static_cast<size_t>(cols()));
    TESSERA_RETURN_IF_ERROR(store_->GatherExisting(c.unique_ids, gathered.data()));
    args.rows = gathered.data();
    kernels::EmbeddingBagForwardCpu(args);
  } else {
    // Pooled straight from the store's rows, under its read lock: no copy.
    const bool keep_rows = store_->stable_rows();
    TESSERA_RETURN_IF_ERROR(store_->Read(c.unique_ids, [&](const float* const* rows, int64_t n) {
      args.row_ptrs = rows;
      kernels::EmbeddingBagForwardCpu(args);
      if (keep_rows) {
        // For the update: the store does not move them (stable_rows).
        c.row_ptrs.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) c.row_ptrs[i] = const_cast<float*>(rows[i]);
      }
    }));
    if (keep_rows) c.row_store = store_.get();
  }
  *ctx = std::move(c);
  return Status::OK();
}

Status EmbeddingShard::ForwardRows(std::span<const int64_t> ids, kernels::IdDeduper* dedup, ForwardContextEntry* ctx,
                                   float* out, bool evaluation) {
  TESSERA_RETURN_IF_ERROR(CheckIds(ids));
  ForwardContextEntry c;
  c.shard = spec_.shard_id;
  c.rows = true;
  c.pooling = kernels::Pooling::kNone;
  c.num_bags = c.out_rows = static_cast<int64_t>(ids.size());
  // Distinct, so that a row's gradient comes once and is applied once.
  dedup->Run(ids, &c.unique_ids, &c.inverse);
  if (c.unique_ids.size() != ids.size()) {
    return Status::InvalidArgument("a rows lookup entry for shard " + std::to_string(spec_.shard_id) + " of table " +
                                   table_.name + " repeats ids: " + std::to_string(ids.size()) + " ids, " +
                                   std::to_string(c.unique_ids.size()) + " distinct");
  }
  c.inverse.clear();
  c.inverse.shrink_to_fit();
  if (out != nullptr) {
    if (DeviceRowStore* tier = store_->device_tier(); tier != nullptr && !evaluation) {
      // Each id a bag of one: the rows come back as stored.
      std::vector<int32_t> identity(ids.size());
      std::vector<int64_t> offsets(ids.size() + 1);
      for (size_t i = 0; i < ids.size(); ++i) identity[i] = static_cast<int32_t>(i);
      for (size_t i = 0; i <= ids.size(); ++i) offsets[i] = static_cast<int64_t>(i);
      TESSERA_RETURN_IF_ERROR(
          tier->Forward(c.unique_ids, identity, offsets, nullptr, kernels::Pooling::kNone, cols(), out));
    } else {
      TESSERA_RETURN_IF_ERROR(evaluation ? store_->GatherExisting(c.unique_ids, out)
                                         : store_->Gather(c.unique_ids, out));
    }
  }
  *ctx = std::move(c);
  return Status::OK();
}

Status EmbeddingShard::Backward(const ForwardContextEntry& ctx, const float* grad_out, float* grad_rows) const {
  if (ctx.rows) {
    // The trainer sent the rows' gradients themselves.
    std::copy(grad_out, grad_out + ctx.out_rows * cols(), grad_rows);
    return Status::OK();
  }
  if (DeviceRowStore* tier = store_->device_tier()) {
    return tier->Backward(ctx.inverse, ctx.offsets, ctx.weights.empty() ? nullptr : ctx.weights.data(), ctx.pooling,
                          cols(), grad_out, static_cast<int64_t>(ctx.unique_ids.size()), grad_rows);
  }
  kernels::EmbeddingBagBackwardArgs<int32_t> args;
  args.grad_out = grad_out;
  args.dim = cols();
  args.indices = ctx.inverse.data();
  args.offsets = ctx.offsets.data();
  args.num_bags = ctx.num_bags;
  args.weights = ctx.weights.empty() ? nullptr : ctx.weights.data();
  args.pooling = ctx.pooling;
  args.num_rows = static_cast<int64_t>(ctx.unique_ids.size());
  args.grad_rows = grad_rows;
  kernels::EmbeddingBagBackwardCpu(args);
  return Status::OK();
}

Status EmbeddingShard::Apply(std::span<const int64_t> ids, const float* grad_rows, std::span<float* const> rows,
                             const RowStore* from) {
  std::shared_lock<std::shared_mutex> applying(apply_mu_);
  if (tracking_.load(std::memory_order_acquire)) {
    // Before the update: a copy that reads the row after this point is
    // sent it again anyway.
    std::lock_guard<std::mutex> lock(changed_mu_);
    changed_.insert(changed_.end(), ids.begin(), ids.end());
  }
  const int dim = cols();
  if (DeviceRowStore* tier = store_->device_tier()) return tier->Apply(optimizer_, dim, ids, grad_rows);
  auto update = [&](float* const* found, int64_t n) {
    kernels::ApplySparseOptimizerCpu(optimizer_, dim, found, grad_rows, n);
  };
  if (from == store_.get() && rows.size() == ids.size() && store_->stable_rows()) {
    return store_->UpdateRows(rows.data(), static_cast<int64_t>(rows.size()), update);
  }
  return store_->Update(ids, update);
}

void EmbeddingShard::TrackChanges(bool on) {
  std::unique_lock<std::shared_mutex> no_update_in_flight(apply_mu_);
  std::lock_guard<std::mutex> lock(changed_mu_);
  changed_.clear();
  changed_.shrink_to_fit();
  tracking_.store(on, std::memory_order_release);
}

std::vector<int64_t> EmbeddingShard::ChangedIds(int64_t begin, int64_t end) const {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(changed_mu_);
    for (int64_t id : changed_) {
      if (id >= begin && id < end) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace tessera
