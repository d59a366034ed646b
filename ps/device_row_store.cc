#include "ps/device_row_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera {

StatusOr<std::unique_ptr<DeviceRowStore>> DeviceRowStore::Create(const RowStoreOptions& options,
                                                                  std::unique_ptr<SlotTable> table,
                                                                  std::unique_ptr<RowStore> lower, int64_t id_base,
                                                                  int64_t id_count) {
  CHECK(table != nullptr && lower != nullptr);
  CHECK_EQ(table->row_width(), options.row_width);
  CHECK_EQ(lower->row_width(), options.row_width);
  if (table->capacity() < 1 || table->capacity() > INT32_MAX) {
    return Status::InvalidArgument("GPU tier: " + std::to_string(table->capacity()) +
                                   " slots (must be between 1 and 2^31 - 1)");
  }
  if (id_count < 0) return Status::InvalidArgument("GPU tier: negative id count");
  return std::unique_ptr<DeviceRowStore>(
      new DeviceRowStore(options, std::move(table), std::move(lower), id_base, id_count));
}

DeviceRowStore::DeviceRowStore(const RowStoreOptions& options, std::unique_ptr<SlotTable> table,
                               std::unique_ptr<RowStore> lower, int64_t id_base, int64_t id_count)
    : RowStore(options), table_(std::move(table)), lower_(std::move(lower)), id_base_(id_base), id_count_(id_count) {
  const size_t cap = static_cast<size_t>(table_->capacity());
  if (id_count_ <= table_->capacity()) dense_slot_.assign(static_cast<size_t>(id_count_), -1);
  slot_id_.assign(cap, -1);
  dirty_.assign(cap, 0);
  referenced_.assign(cap, 0);
  below_.assign(cap, 0);
  pinned_at_.assign(cap, 0);
  free_.reserve(cap);
  // Popped from the back: slot 0 is handed out first.
  for (size_t s = cap; s-- > 0;) free_.push_back(static_cast<int32_t>(s));
}

DeviceRowStore::~DeviceRowStore() {
  Status s = Flush();
  if (!s.ok()) LOG(ERROR) << "GPU tier: rows not written back at close: " << s;
}

int32_t DeviceRowStore::Find(int64_t id) const {
  if (!dense_slot_.empty()) {
    const int64_t k = id - id_base_;
    return (k >= 0 && k < id_count_) ? dense_slot_[static_cast<size_t>(k)] : -1;
  }
  auto it = hashed_slot_.find(id);
  return it == hashed_slot_.end() ? -1 : it->second;
}

void DeviceRowStore::SetIndex(int64_t id, int32_t slot) {
  if (!dense_slot_.empty()) {
    dense_slot_[static_cast<size_t>(id - id_base_)] = slot;
  } else {
    hashed_slot_[id] = slot;
  }
}

void DeviceRowStore::EraseIndex(int64_t id) {
  if (!dense_slot_.empty()) {
    dense_slot_[static_cast<size_t>(id - id_base_)] = -1;
  } else {
    hashed_slot_.erase(id);
  }
}

std::vector<int32_t> DeviceRowStore::PickSlots(size_t n) {
  std::vector<int32_t> picked;
  picked.reserve(n);
  while (picked.size() < n && !free_.empty()) {
    picked.push_back(free_.back());
    free_.pop_back();
  }
  // CLOCK: a referenced slot gets a second chance (its bit cleared); two full
  // turns without finding an unpinned, unreferenced slot means every slot is
  // pinned by this request.
  const size_t cap = slot_id_.size();
  for (size_t scanned = 0; picked.size() < n && scanned < 2 * cap; ++scanned) {
    const size_t s = hand_;
    hand_ = (hand_ + 1) % cap;
    if (pinned_at_[s] == request_ || slot_id_[s] < 0) continue;
    if (referenced_[s]) {
      referenced_[s] = 0;
      continue;
    }
    pinned_at_[s] = request_;  // not picked twice
    picked.push_back(static_cast<int32_t>(s));
  }
  return picked;
}

Status DeviceRowStore::WriteBack(std::span<const int32_t> slots) {
  std::vector<int32_t> dirty;
  std::vector<int64_t> ids;
  for (int32_t s : slots) {
    if (slot_id_[s] >= 0 && dirty_[s]) {
      dirty.push_back(s);
      ids.push_back(slot_id_[s]);
    }
  }
  if (dirty.empty()) return Status::OK();
  std::vector<float> rows(dirty.size() * static_cast<size_t>(row_width()));
  TESSERA_RETURN_IF_ERROR(table_->Download(dirty, rows.data()));
  TESSERA_RETURN_IF_ERROR(lower_->Put(ids, rows.data()));
  for (int32_t s : dirty) {
    dirty_[s] = 0;
    if (!below_[s]) {
      below_[s] = 1;
      --resident_not_below_;
    }
  }
  writebacks_ += static_cast<int64_t>(dirty.size());
  return Status::OK();
}

Status DeviceRowStore::WriteBackAllDirty() {
  std::vector<int32_t> dirty;
  for (size_t s = 0; s < slot_id_.size(); ++s) {
    if (slot_id_[s] >= 0 && dirty_[s]) dirty.push_back(static_cast<int32_t>(s));
  }
  return WriteBack(dirty);
}

Status DeviceRowStore::Resolve(std::span<const int64_t> ids, bool fetch, std::vector<int32_t>* slots) {
  if (static_cast<int64_t>(ids.size()) > table_->capacity()) {
    return Status::ResourceExhausted("a request touches " + std::to_string(ids.size()) +
                                     " distinct rows of one shard but its GPU tier holds " +
                                     std::to_string(table_->capacity()) + " (raise --gpu_bytes)");
  }
  ++request_;
  slots->resize(ids.size());
  std::vector<size_t> missing;  // positions in ids of the first occurrence of each missing id
  std::vector<std::pair<size_t, size_t>> repeats;  // (position, earlier position) of a missing id seen twice
  std::unordered_map<int64_t, size_t> first_missing;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t s = Find(ids[i]);
    (*slots)[i] = s;
    if (s >= 0) {
      referenced_[s] = 1;
      pinned_at_[s] = request_;
    } else if (auto [it, fresh] = first_missing.emplace(ids[i], i); fresh) {
      missing.push_back(i);
    } else {
      repeats.emplace_back(i, it->second);
    }
  }
  misses_ += static_cast<int64_t>(missing.size() + repeats.size());
  hits_ += static_cast<int64_t>(ids.size()) - static_cast<int64_t>(missing.size() + repeats.size());
  if (missing.empty()) return Status::OK();

  std::vector<int32_t> picked = PickSlots(missing.size());
  // The capacity check above leaves room for every miss (this request pins
  // at most ids.size() slots).
  CHECK_EQ(picked.size(), missing.size());
  auto give_back = [&]() {
    for (int32_t s : picked) {
      if (slot_id_[s] < 0) free_.push_back(s);
    }
  };
  Status st = WriteBack(picked);
  std::vector<int64_t> miss_ids(missing.size());
  for (size_t k = 0; k < missing.size(); ++k) miss_ids[k] = ids[missing[k]];
  if (st.ok() && fetch) {
    rows_.resize(missing.size() * static_cast<size_t>(row_width()));
    const size_t bytes = static_cast<size_t>(row_width()) * sizeof(float);
    st = lower_->Read(miss_ids, [&](const float* const* rows, int64_t n) {
      for (int64_t k = 0; k < n; ++k) std::memcpy(rows_.data() + k * row_width(), rows[k], bytes);
    });
    if (st.ok()) st = table_->Upload(picked, rows_.data());
  }
  if (!st.ok()) {
    // Victims stay where they are (written back, so clean, if that worked).
    give_back();
    return st.WithContext("GPU tier: bringing in " + std::to_string(missing.size()) + " rows");
  }
  for (size_t k = 0; k < picked.size(); ++k) {
    const int32_t s = picked[k];
    if (slot_id_[s] >= 0) {
      EraseIndex(slot_id_[s]);
      ++evictions_;
      --resident_;
      if (!below_[s]) --resident_not_below_;
    }
    slot_id_[s] = miss_ids[k];
    SetIndex(miss_ids[k], s);
    dirty_[s] = 0;
    referenced_[s] = 1;
    pinned_at_[s] = request_;
    // A row read from below exists there now (Read materializes it); a row
    // about to be Put does not until it is written back.
    below_[s] = fetch ? 1 : 0;
    ++resident_;
    if (!fetch) ++resident_not_below_;
    (*slots)[missing[k]] = s;
  }
  for (const auto& [i, first] : repeats) (*slots)[i] = (*slots)[first];
  return Status::OK();
}

void DeviceRowStore::DropResident(std::span<const int64_t> ids) {
  for (int64_t id : ids) {
    const int32_t s = Find(id);
    if (s < 0) continue;
    EraseIndex(id);
    if (!below_[s]) --resident_not_below_;
    slot_id_[s] = -1;
    dirty_[s] = 0;
    --resident_;
    free_.push_back(s);
  }
}

Status DeviceRowStore::Read(std::span<const int64_t> ids, const ReadFn& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Oversized(ids)) {
    // More rows than slots: the store below answers, once it has the newest values.
    TESSERA_RETURN_IF_ERROR(WriteBackAllDirty());
    return lower_->Read(ids, fn);
  }
  TESSERA_RETURN_IF_ERROR(Resolve(ids, true, &slots_));
  rows_.resize(ids.size() * static_cast<size_t>(row_width()));
  TESSERA_RETURN_IF_ERROR(table_->Download(slots_, rows_.data()));
  std::vector<const float*> ptrs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ptrs[i] = rows_.data() + i * row_width();
  fn(ptrs.data(), static_cast<int64_t>(ids.size()));
  return Status::OK();
}

Status DeviceRowStore::GatherExisting(std::span<const int64_t> ids, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const int cols = gather_cols();
  std::vector<int32_t> resident;
  std::vector<size_t> resident_at;
  std::vector<int64_t> below;
  std::vector<size_t> below_at;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t s = Find(ids[i]);
    if (s >= 0) {
      resident.push_back(s);
      resident_at.push_back(i);
    } else {
      below.push_back(ids[i]);
      below_at.push_back(i);
    }
  }
  if (!resident.empty()) {
    rows_.resize(resident.size() * static_cast<size_t>(row_width()));
    TESSERA_RETURN_IF_ERROR(table_->Download(resident, rows_.data()));
    for (size_t k = 0; k < resident.size(); ++k) {
      std::memcpy(out + resident_at[k] * cols, rows_.data() + k * row_width(), sizeof(float) * cols);
    }
  }
  if (!below.empty()) {
    // Rows not resident were written back when they left the tier: the
    // store below has their newest values.
    std::vector<float> got(below.size() * static_cast<size_t>(cols));
    TESSERA_RETURN_IF_ERROR(lower_->GatherExisting(below, got.data()));
    for (size_t k = 0; k < below.size(); ++k) {
      std::memcpy(out + below_at[k] * cols, got.data() + k * cols, sizeof(float) * cols);
    }
  }
  return Status::OK();
}

Status DeviceRowStore::Update(std::span<const int64_t> ids, const UpdateFn& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Oversized(ids)) {
    TESSERA_RETURN_IF_ERROR(WriteBackAllDirty());
    DropResident(ids);  // clean now; the updated values are below
    return lower_->Update(ids, fn);
  }
  TESSERA_RETURN_IF_ERROR(Resolve(ids, true, &slots_));
  rows_.resize(ids.size() * static_cast<size_t>(row_width()));
  TESSERA_RETURN_IF_ERROR(table_->Download(slots_, rows_.data()));
  std::vector<float*> ptrs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ptrs[i] = rows_.data() + i * row_width();
  fn(ptrs.data(), static_cast<int64_t>(ids.size()));
  TESSERA_RETURN_IF_ERROR(table_->Upload(slots_, rows_.data()));
  for (int32_t s : slots_) dirty_[s] = 1;
  return Status::OK();
}

Status DeviceRowStore::Put(std::span<const int64_t> ids, const float* rows) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Oversized(ids)) {
    DropResident(ids);  // their resident values are being overwritten
    return lower_->Put(ids, rows);
  }
  TESSERA_RETURN_IF_ERROR(Resolve(ids, false, &slots_));
  TESSERA_RETURN_IF_ERROR(table_->Upload(slots_, rows));
  for (int32_t s : slots_) dirty_[s] = 1;
  return Status::OK();
}

Status DeviceRowStore::ForEach(const std::function<Status(int64_t id, const float* row)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  TESSERA_RETURN_IF_ERROR(WriteBackAllDirty());
  return lower_->ForEach(fn);
}

int64_t DeviceRowStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lower_->size() + resident_not_below_;
}

RowStoreStats DeviceRowStore::Stats() const {
  RowStoreStats below = lower_->Stats();
  std::lock_guard<std::mutex> lock(mu_);
  RowStoreStats s;
  TierStats gpu;
  gpu.name = "gpu";
  gpu.hits = hits_;
  gpu.misses = misses_;
  gpu.evictions = evictions_;
  gpu.writebacks = writebacks_;
  gpu.rows_resident = resident_;
  const int64_t row_bytes = static_cast<int64_t>(row_width()) * static_cast<int64_t>(sizeof(float));
  gpu.bytes_resident = resident_ * row_bytes;
  gpu.byte_budget = table_->capacity() * row_bytes;
  s = below;
  s.tiers.insert(s.tiers.begin(), gpu);
  return s;
}

Status DeviceRowStore::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  TESSERA_RETURN_IF_ERROR(WriteBackAllDirty());
  return lower_->Flush();
}

namespace {

SlotBags Bags(std::span<const int32_t> index, std::span<const int64_t> offsets, const float* weights,
              kernels::Pooling pooling) {
  SlotBags bags;
  bags.index = index.data();
  bags.num_ids = static_cast<int64_t>(index.size());
  bags.offsets = offsets.data();
  bags.num_bags = static_cast<int64_t>(offsets.size()) - 1;
  bags.weights = weights;
  bags.pooling = pooling;
  return bags;
}

}  // namespace

Status DeviceRowStore::Forward(std::span<const int64_t> unique_ids, std::span<const int32_t> inverse,
                               std::span<const int64_t> offsets, const float* weights, kernels::Pooling pooling,
                               int dim, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  TESSERA_RETURN_IF_ERROR(Resolve(unique_ids, true, &slots_));
  slot_per_id_.resize(inverse.size());
  for (size_t i = 0; i < inverse.size(); ++i) slot_per_id_[i] = slots_[inverse[i]];
  return table_->Forward(Bags(slot_per_id_, offsets, weights, pooling), dim, out);
}

Status DeviceRowStore::Backward(std::span<const int32_t> inverse, std::span<const int64_t> offsets,
                                const float* weights, kernels::Pooling pooling, int dim, const float* grad_out,
                                int64_t num_unique, float* grad_rows) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_->Backward(Bags(inverse, offsets, weights, pooling), dim, grad_out, num_unique, grad_rows);
}

Status DeviceRowStore::Apply(const kernels::SparseOptimizerConfig& config, int dim, std::span<const int64_t> ids,
                             const float* grad_rows) {
  std::lock_guard<std::mutex> lock(mu_);
  TESSERA_RETURN_IF_ERROR(Resolve(ids, true, &slots_));
  TESSERA_RETURN_IF_ERROR(table_->ApplyOptimizer(config, dim, slots_, grad_rows));
  for (int32_t s : slots_) dirty_[s] = 1;
  return Status::OK();
}

}  // namespace tessera
