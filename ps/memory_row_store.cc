// MemoryRowStore: rows in host memory, found through an open-addressing hash
// map from row id to a slot in chunked slabs (slots never move, so row
// pointers handed to an update stay valid while the map grows).
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "kernels/row_init.h"
#include "ps/row_store.h"

namespace tessera {
namespace {

class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(RowStoreOptions options) : RowStore(std::move(options)) { Rehash(1024); }

  Status Gather(std::span<const int64_t> ids, float* out) override {
    const int cols = gather_cols();
    bool missing = false;
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t slot = Find(ids[i]);
        if (slot < 0) {
          missing = true;
          break;
        }
        std::memcpy(out + i * cols, Row(slot), sizeof(float) * cols);
      }
    }
    if (!missing) return Status::OK();
    // Rows read for the first time are initialized once and kept: training
    // updates what it reads, so computing them again at the update is waste.
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(out + i * cols, Row(FindOrInsert(ids[i], /*init=*/true)), sizeof(float) * cols);
    }
    return Status::OK();
  }

  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override {
    std::vector<float*> rows(ids.size());
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) rows[i] = Row(FindOrInsert(ids[i], /*init=*/true));
    fn(rows.data(), static_cast<int64_t>(rows.size()));
    return Status::OK();
  }

  Status Put(std::span<const int64_t> ids, const float* rows) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(Row(FindOrInsert(ids[i], /*init=*/false)), rows + i * row_width(), sizeof(float) * row_width());
    }
    return Status::OK();
  }

  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (int64_t slot = 0; slot < count_; ++slot) TESSERA_RETURN_IF_ERROR(fn(slot_ids_[slot], Row(slot)));
    return Status::OK();
  }

  int64_t size() const override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return count_;
  }

 private:
  static constexpr int64_t kChunkRows = 1 << 14;
  static constexpr int32_t kEmpty = -1;

  static uint64_t Hash(int64_t id) { return kernels::SplitMix64(static_cast<uint64_t>(id)); }

  float* Row(int64_t slot) {
    return chunks_[slot / kChunkRows].get() + (slot % kChunkRows) * static_cast<int64_t>(row_width());
  }

  // Slot of id, or -1. REQUIRES: mu_ held (shared is enough).
  int64_t Find(int64_t id) const {
    for (uint64_t pos = Hash(id) & mask_;; pos = (pos + 1) & mask_) {
      const int64_t slot = table_[pos];
      if (slot == kEmpty) return -1;
      if (slot_ids_[slot] == id) return slot;
    }
  }

  // REQUIRES: mu_ held exclusively.
  int64_t FindOrInsert(int64_t id, bool init) {
    uint64_t pos = Hash(id) & mask_;
    for (;; pos = (pos + 1) & mask_) {
      const int64_t slot = table_[pos];
      if (slot == kEmpty) break;
      if (slot_ids_[slot] == id) return slot;
    }
    const int64_t slot = count_++;
    if (slot / kChunkRows >= static_cast<int64_t>(chunks_.size())) {
      chunks_.emplace_back(new float[kChunkRows * row_width()]);
    }
    slot_ids_.push_back(id);
    table_[pos] = slot;
    if (init) options_.init(id, Row(slot));
    // Keep the load factor under 1/2 so probes stay short.
    if (static_cast<uint64_t>(count_) * 2 > mask_ + 1) Rehash((mask_ + 1) * 2);
    return slot;
  }

  void Rehash(uint64_t capacity) {
    table_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    for (int64_t slot = 0; slot < count_; ++slot) {
      uint64_t pos = Hash(slot_ids_[slot]) & mask_;
      while (table_[pos] != kEmpty) pos = (pos + 1) & mask_;
      table_[pos] = slot;
    }
  }

  mutable std::shared_mutex mu_;
  std::vector<int64_t> table_;  // GUARDED_BY(mu_): slot index or kEmpty
  uint64_t mask_ = 0;           // GUARDED_BY(mu_)
  std::vector<int64_t> slot_ids_;                 // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<float[]>> chunks_;  // GUARDED_BY(mu_)
  int64_t count_ = 0;                             // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<RowStore> NewMemoryRowStore(const RowStoreOptions& options) {
  return std::make_unique<MemoryRowStore>(options);
}

}  // namespace tessera
