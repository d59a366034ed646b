// MemoryRowStore: rows in host memory, in chunked slabs (slots never move, so
// row pointers handed to an update stay valid while the index grows). Chunks
// double in size; with RowStoreOptions::huge_pages, those of 2 MiB or more
// sit on transparent huge pages (one TLB miss fewer per random row, a dearer
// first touch).
//
// A row is found through a direct index over the shard's own ids (one
// pointer per id of its range) when that costs at most a quarter of the rows
// themselves or 1 MiB, else through an open-addressing hash map from id to
// row. The direct index is 4x smaller than the map for a table whose rows
// are all used (8 bytes per id against 32 per stored row at the map's load
// factor), so more of it stays in cache, and a probe costs no hashing.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <glog/logging.h>

#include "kernels/row_init.h"
#include "ps/page_memory.h"
#include "ps/row_store.h"

namespace tessera {
namespace {

class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(RowStoreOptions options) : RowStore(std::move(options)) {
    const int64_t range = options_.id_end - options_.id_begin;
    const int64_t index_bytes = range * static_cast<int64_t>(sizeof(float*));
    const int64_t rows_bytes = range * 4 * static_cast<int64_t>(options_.row_width);
    if (range > 0 && range <= kMaxDirectIds && index_bytes <= std::max(kSmallIndexBytes, rows_bytes / 4)) {
      // Untouched pages of the index are never committed: a table whose
      // rows are used sparsely pays only for the pages its ids fall on.
      direct_memory_ = PageMemory::Map(static_cast<size_t>(range) * sizeof(float*), /*huge_pages=*/false);
      if (!direct_memory_.empty()) {
        direct_ = static_cast<float**>(direct_memory_.data());  // zeroed pages: every entry nullptr
        direct_begin_ = options_.id_begin;
        direct_size_ = static_cast<uint64_t>(range);
      }
    }
    Rehash(1024);
  }

  Status Read(std::span<const int64_t> ids, const ReadFn& fn) override {
    std::vector<const float*>& rows = ThreadRowPointers(ids.size());
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      bool missing = false;
      for (size_t i = 0; i < ids.size() && !missing; ++i) {
        if (i + kPrefetchAhead < ids.size()) PrefetchEntry(ids[i + kPrefetchAhead]);
        rows[i] = Find(ids[i]);
        missing = rows[i] == nullptr;
      }
      if (!missing) {
        hits_.fetch_add(static_cast<int64_t>(ids.size()), std::memory_order_relaxed);
        fn(rows.data(), static_cast<int64_t>(ids.size()));
        return Status::OK();
      }
    }
    // Rows read for the first time are initialized once and kept: training
    // updates what it reads, so computing them again at the update is waste.
    std::unique_lock<std::shared_mutex> lock(mu_);
    const int64_t before = count_;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kPrefetchAhead < ids.size()) PrefetchEntry(ids[i + kPrefetchAhead]);
      rows[i] = FindOrInsert(ids[i], /*init=*/true);
    }
    misses_.fetch_add(count_ - before, std::memory_order_relaxed);
    hits_.fetch_add(static_cast<int64_t>(ids.size()) - (count_ - before), std::memory_order_relaxed);
    fn(rows.data(), static_cast<int64_t>(ids.size()));
    return Status::OK();
  }

  Status GatherExisting(std::span<const int64_t> ids, float* out) override {
    const int cols = gather_cols();
    thread_local std::vector<float> initial;
    initial.resize(static_cast<size_t>(row_width()));
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kPrefetchAhead < ids.size()) PrefetchEntry(ids[i + kPrefetchAhead]);
      const float* row = Find(ids[i]);
      if (row == nullptr) {
        options_.init(ids[i], initial.data());
        row = initial.data();
      }
      std::memcpy(out + i * cols, row, sizeof(float) * cols);
    }
    return Status::OK();
  }

  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override {
    std::vector<float*> rows(ids.size());
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kPrefetchAhead < ids.size()) PrefetchEntry(ids[i + kPrefetchAhead]);
      rows[i] = FindOrInsert(ids[i], /*init=*/true);
    }
    fn(rows.data(), static_cast<int64_t>(rows.size()));
    return Status::OK();
  }

  // Slots never move and are freed only with the store.
  bool stable_rows() const override { return true; }
  Status UpdateRows(float* const* rows, int64_t n, const UpdateFn& fn) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    fn(rows, n);
    return Status::OK();
  }

  Status Put(std::span<const int64_t> ids, const float* rows) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(FindOrInsert(ids[i], /*init=*/false), rows + i * row_width(), sizeof(float) * row_width());
    }
    return Status::OK();
  }

  void Reserve(int64_t rows) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    const uint64_t want = static_cast<uint64_t>(count_ + std::max<int64_t>(0, rows));
    slot_ids_.reserve(want);
    slot_rows_.reserve(want);
    if (direct_ != nullptr) return;  // the shard's ids need no map
    uint64_t capacity = mask_ + 1;
    while (want * 2 > capacity) capacity *= 2;  // the load factor FindOrInsert keeps
    if (capacity != mask_ + 1) Rehash(capacity);
  }

  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (int64_t slot = 0; slot < count_; ++slot) TESSERA_RETURN_IF_ERROR(fn(slot_ids_[slot], slot_rows_[slot]));
    return Status::OK();
  }

  int64_t size() const override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return count_;
  }

  RowStoreStats Stats() const override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    TierStats t;
    t.name = "memory";
    t.hits = hits_.load(std::memory_order_relaxed);
    t.misses = misses_.load(std::memory_order_relaxed);
    t.rows_resident = count_;
    t.bytes_resident = count_ * 4 * static_cast<int64_t>(row_width());
    RowStoreStats s;
    s.tiers.push_back(t);
    return s;
  }

 private:
  // The map's entries hold the row's address next to its id: a probe costs
  // one cache miss, not one for the entry, one for the id and one for the
  // address (a third of a parameter server's time went there).
  struct Entry {
    int64_t id;
    float* row;  // nullptr: empty
  };
  // Ids whose map entry is fetched ahead of use: enough to cover a memory
  // latency with the probes in between.
  static constexpr size_t kPrefetchAhead = 8;

  static std::vector<const float*>& ThreadRowPointers(size_t n) {
    thread_local std::vector<const float*> rows;
    rows.resize(n);
    return rows;
  }

  static uint64_t Hash(int64_t id) { return kernels::SplitMix64(static_cast<uint64_t>(id)); }

  // The largest id range indexed directly: 1 GiB of address space. Below
  // that, a range is indexed directly when its index takes at most a
  // quarter of what its rows would all take, or is small whatever they take.
  static constexpr int64_t kMaxDirectIds = int64_t{1} << 27;
  static constexpr int64_t kSmallIndexBytes = int64_t{1} << 20;

  // Where id's entry sits in the direct index, or direct_size_ when it has
  // none (no index, or an id outside the shard's range).
  uint64_t DirectSlot(int64_t id) const {
    const uint64_t k = static_cast<uint64_t>(id) - static_cast<uint64_t>(direct_begin_);
    return k < direct_size_ ? k : direct_size_;
  }

  // Adds a chunk for more slots: 1024 rows, doubling up to 64 MiB. Chunks
  // come straight from the kernel (ps/page_memory.h): dropped, they go back
  // to the system whatever malloc does with its own blocks.
  void Grow() {
    const int64_t width_bytes = static_cast<int64_t>(row_width()) * 4;
    const int64_t max_rows = std::max<int64_t>(1, (int64_t{64} << 20) / width_bytes);
    const int64_t rows = std::min(max_rows, std::max<int64_t>(1024, count_));
    constexpr int64_t kHuge = int64_t{2} << 20;
    const int64_t bytes = rows * width_bytes;
    PageMemory chunk = PageMemory::Map(static_cast<size_t>(bytes), options_.huge_pages && bytes >= kHuge);
    CHECK(!chunk.empty()) << "out of memory for " << bytes << " bytes of rows";
    next_row_ = static_cast<float*>(chunk.data());
    rows_left_ = rows;
    chunks_.push_back(std::move(chunk));
  }

  // REQUIRES: mu_ held (shared is enough).
  void PrefetchEntry(int64_t id) const {
    const uint64_t k = DirectSlot(id);
    if (k < direct_size_) {
      __builtin_prefetch(&direct_[k]);
    } else {
      __builtin_prefetch(&table_[Hash(id) & mask_]);
    }
  }

  // The row of id, or nullptr. REQUIRES: mu_ held (shared is enough).
  float* Find(int64_t id) const {
    if (const uint64_t k = DirectSlot(id); k < direct_size_) return direct_[k];
    for (uint64_t pos = Hash(id) & mask_;; pos = (pos + 1) & mask_) {
      const Entry& e = table_[pos];
      if (e.row == nullptr) return nullptr;
      if (e.id == id) return e.row;
    }
  }

  // REQUIRES: mu_ held exclusively.
  float* FindOrInsert(int64_t id, bool init) {
    const uint64_t k = DirectSlot(id);
    uint64_t pos = 0;
    if (k < direct_size_) {
      if (direct_[k] != nullptr) return direct_[k];
    } else {
      for (pos = Hash(id) & mask_;; pos = (pos + 1) & mask_) {
        const Entry& e = table_[pos];
        if (e.row == nullptr) break;
        if (e.id == id) return e.row;
      }
    }
    ++count_;
    if (rows_left_ == 0) Grow();
    float* row = next_row_;
    next_row_ += row_width();
    --rows_left_;
    slot_rows_.push_back(row);
    slot_ids_.push_back(id);
    if (init) options_.init(id, row);
    if (k < direct_size_) {
      direct_[k] = row;
      return row;
    }
    table_[pos] = {id, row};
    // Keep the load factor under 1/2 so probes stay short.
    if (static_cast<uint64_t>(++mapped_) * 2 > mask_ + 1) Rehash((mask_ + 1) * 2);
    return row;
  }

  void Rehash(uint64_t capacity) {
    table_.assign(capacity, Entry{0, nullptr});
    mask_ = capacity - 1;
    for (int64_t slot = 0; slot < count_; ++slot) {
      if (DirectSlot(slot_ids_[slot]) < direct_size_) continue;
      uint64_t pos = Hash(slot_ids_[slot]) & mask_;
      while (table_[pos].row != nullptr) pos = (pos + 1) & mask_;
      table_[pos] = {slot_ids_[slot], slot_rows_[slot]};
    }
  }

  mutable std::shared_mutex mu_;
  std::vector<Entry> table_;    // GUARDED_BY(mu_)
  uint64_t mask_ = 0;           // GUARDED_BY(mu_)
  int64_t mapped_ = 0;          // GUARDED_BY(mu_): rows in table_
  // The direct index: direct_[id - direct_begin_] for ids of the shard's
  // range, nullptr where the row is not stored. Set once, at construction.
  PageMemory direct_memory_;
  float** direct_ = nullptr;     // GUARDED_BY(mu_) (its entries)
  int64_t direct_begin_ = 0;
  uint64_t direct_size_ = 0;
  std::vector<int64_t> slot_ids_;                          // GUARDED_BY(mu_)
  std::vector<float*> slot_rows_;                          // GUARDED_BY(mu_)
  float* next_row_ = nullptr;                              // GUARDED_BY(mu_): next unused row
  int64_t rows_left_ = 0;                                  // GUARDED_BY(mu_): in the last chunk
  std::vector<PageMemory> chunks_;  // GUARDED_BY(mu_)
  int64_t count_ = 0;                             // GUARDED_BY(mu_)
  // Rows read that were stored / that had to be initialized.
  std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace

std::unique_ptr<RowStore> NewMemoryRowStore(const RowStoreOptions& options) {
  return std::make_unique<MemoryRowStore>(options);
}

}  // namespace tessera
