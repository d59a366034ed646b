// The host-memory tier over a LowerTier (RocksDB). Resident rows sit in slots
// of chunked slabs (slots never move, so row pointers stay valid while fn
// runs) found through an open-addressing map from row id to slot.
//
// Locking. mu_ guards the map and slot allocation: shared to look rows up,
// exclusive to insert or evict. Row contents are guarded by 64 stripes of
// shared mutexes (readers shared, writers exclusive), so fn may run without
// mu_: a batch whose rows are all resident (the hit path) runs fn under mu_
// shared; a batch with misses pins its rows (SlotMeta::pins) under mu_
// exclusive, drops mu_ and runs fn; eviction skips pinned rows. Victims are
// written back while mu_ is held exclusively, so no batch can re-read a row
// from RocksDB between its write-back and its removal from the map; a batch
// that read RocksDB without a lock re-reads (under mu_) the rows written back
// since, found through written_at_ (per hash bucket, so rarely a few more).
// Order: mu_ before stripes; stripes in ascending order.
#include "ps/tiered_row_store.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "kernels/row_init.h"
#include "ps/evicted_counts.h"
#include "ps/page_memory.h"
#include "ps/stored_below_set.h"
#include "ps/write_back_buffer.h"

namespace tessera {
namespace {

// Bookkeeping of one slot (32 bytes; kept apart from the rows so an eviction
// pass scans only these).
struct SlotMeta {
  int64_t id = -1;                 // row in the slot, -1 if free; written under mu_ exclusive
  std::atomic<uint64_t> tick{0};   // batch that touched the row last
  std::atomic<uint64_t> freq{0};   // kLfuAging: epoch << 32 | count in that epoch
  std::atomic<int32_t> pins{0};    // batches holding the row while they run fn outside mu_
  std::atomic<uint8_t> dirty{0};   // differs from the tier below; set under a stripe held exclusively
  uint8_t below = 0;               // the tier below has the row (maybe an older value); under mu_
};
static_assert(sizeof(SlotMeta) == 32);

constexpr int kStripes = 64;
constexpr int64_t kChunkRows = 1 << 12;
constexpr int32_t kEmpty = -1;
constexpr uint64_t kWrittenBuckets = 1 << 16;
// Counts halve after this many budgets' worth of touches, by default. On
// Zipf 1.05 ids (bench/tier_bench, a tenth of the table) 4 kept 84.2% of the
// rows looked up resident, 8 85.2%, 16 85.9%, and 32 or never 86.1%: a short
// period forgets the rows just outside the hot set between their touches.
// 16 still follows a hot set that moves within a few hundred batches.
constexpr int64_t kDefaultHalvingBudgets = 16;

uint64_t Hash(int64_t id) { return kernels::SplitMix64(static_cast<uint64_t>(id)); }
int StripeOf(uint64_t hash) { return static_cast<int>(hash >> 58); }  // top 6 bits; the map uses the low ones

// Holds the stripes of a batch (bit s of mask: stripe s) while fn runs.
class StripeGuard {
 public:
  StripeGuard(std::shared_mutex* stripes, uint64_t mask, bool exclusive)
      : stripes_(stripes), mask_(mask), exclusive_(exclusive) {
    for (uint64_t m = mask_; m != 0; m &= m - 1) {
      std::shared_mutex& s = stripes_[std::countr_zero(m)];
      exclusive_ ? s.lock() : s.lock_shared();
    }
  }
  ~StripeGuard() {
    for (uint64_t m = mask_; m != 0; m &= m - 1) {
      std::shared_mutex& s = stripes_[std::countr_zero(m)];
      exclusive_ ? s.unlock() : s.unlock_shared();
    }
  }
  StripeGuard(const StripeGuard&) = delete;
  StripeGuard& operator=(const StripeGuard&) = delete;

 private:
  std::shared_mutex* stripes_;
  uint64_t mask_;
  bool exclusive_;
};

class RocksLowerTier final : public LowerTier {
 public:
  explicit RocksLowerTier(std::unique_ptr<RowDb> db) : db_(std::move(db)) {}

  Status Fetch(std::span<const int64_t> ids, float* rows, uint8_t* found) override {
    TESSERA_RETURN_IF_ERROR(db_->Get(ids, rows, found));
    int64_t hits = 0;
    for (size_t i = 0; i < ids.size(); ++i) hits += found[i];
    hits_.fetch_add(hits, std::memory_order_relaxed);
    misses_.fetch_add(static_cast<int64_t>(ids.size()) - hits, std::memory_order_relaxed);
    return Status::OK();
  }
  Status Store(std::span<const int64_t> ids, const float* const* rows) override { return db_->Put(ids, rows); }
  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    return db_->Scan(0, std::numeric_limits<int64_t>::max(), [&](int64_t id, const float* row, int) { return fn(id, row); });
  }
  StatusOr<int64_t> CountRows() override { return db_->CountRows(); }
  Status Flush() override { return db_->Flush(); }
  Status Checkpoint(const std::string& dir) override { return db_->Checkpoint(dir); }
  void AddStats(int64_t rows_stored, RowStoreStats* stats) const override {
    TierStats t;
    t.name = "rocksdb";
    t.hits = hits_.load(std::memory_order_relaxed);
    t.misses = misses_.load(std::memory_order_relaxed);
    t.rows_resident = rows_stored;
    stats->tiers.push_back(t);
    db_->AddTraffic(stats);
  }

 private:
  std::unique_ptr<RowDb> db_;
  std::atomic<int64_t> hits_{0}, misses_{0};
};

class TieredRowStore final : public RowStore, public RocksCheckpointable {
 public:
  TieredRowStore(const TieredRowStoreOptions& options, std::unique_ptr<LowerTier> below, int64_t rows_below)
      : RowStore(options.rows),
        policy_(options.policy),
        row_bytes_(HostTierBytesPerRow(options.rows.row_width)),
        budget_rows_(options.host_bytes / row_bytes_),
        slack_rows_(static_cast<int64_t>(static_cast<double>(budget_rows_) * options.eviction_slack)),
        halving_accesses_(options.lfu_halving_accesses > 0
                              ? options.lfu_halving_accesses
                              : kDefaultHalvingBudgets * std::max<int64_t>(budget_rows_, 1024)),
        below_(std::move(below)),
        below_ids_(StoredBelowSet::BytesFor(options.rows.id_end - options.rows.id_begin) <= options.host_bytes / 16
                       ? StoredBelowSet::Over(options.rows.id_begin, options.rows.id_end, rows_below > 0)
                       : StoredBelowSet()),
        evicted_counts_(options.policy == EvictionPolicy::kLfuAging && !below_ids_.empty() &&
                                StoredBelowSet::BytesFor(options.rows.id_end - options.rows.id_begin) +
                                        EvictedCounts::BytesFor(options.rows.id_end - options.rows.id_begin) <=
                                    options.host_bytes / 16
                            ? EvictedCounts::Over(options.rows.id_begin, options.rows.id_end)
                            : EvictedCounts()),
        rows_below_(rows_below) {
    Rehash(1024);
  }

  ~TieredRowStore() override {
    Status s = Flush();
    if (!s.ok()) LOG(ERROR) << "closing tiered row store: " << s;
  }

  Status Read(std::span<const int64_t> ids, const ReadFn& fn) override {
    return Run(ids, /*write=*/false, [&](float* const* rows, int64_t n) { fn(rows, n); });
  }
  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override { return Run(ids, /*write=*/true, fn); }
  bool has_slower_tier() const override { return true; }
  // A Read that looks at nothing: the misses are fetched and inserted.
  Status Warm(std::span<const int64_t> ids) override {
    return Run(ids, /*write=*/false, [](float* const*, int64_t) {});
  }
  // Resident rows from memory, the others from below or, where below has
  // none, their initial value; nothing is promoted or created. mu_ stays
  // shared throughout, so no eviction or write-back runs meanwhile and what
  // is below is current for every row not resident.
  Status GatherExisting(std::span<const int64_t> ids, float* out) override {
    const int cols = gather_cols(), w = row_width();
    std::vector<int64_t> missing;
    std::vector<size_t> where;
    std::shared_lock<std::shared_mutex> lock(mu_);
    {
      StripeGuard rows(stripes_, ~uint64_t{0}, /*exclusive=*/false);
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t slot = Find(ids[i], Hash(ids[i]));
        if (slot >= 0) {
          std::memcpy(out + i * cols, Row(slot), sizeof(float) * cols);
        } else {
          missing.push_back(ids[i]);
          where.push_back(i);
        }
      }
    }
    if (missing.empty()) return Status::OK();
    std::vector<float> rows(missing.size() * w);
    std::vector<uint8_t> found(missing.size());
    TESSERA_RETURN_IF_ERROR(Fetch(missing, rows.data(), found.data()));
    for (size_t k = 0; k < missing.size(); ++k) {
      if (!found[k]) options_.init(missing[k], &rows[k * w]);
      std::memcpy(out + where[k] * cols, &rows[k * w], sizeof(float) * cols);
    }
    return Status::OK();
  }
  Status Put(std::span<const int64_t> ids, const float* rows) override {
    // Promotes the rows first only to keep one path; Put is rare (restores).
    const size_t bytes = sizeof(float) * row_width();
    return Run(ids, /*write=*/true, [&](float* const* ptrs, int64_t n) {
      for (int64_t i = 0; i < n; ++i) std::memcpy(ptrs[i], rows + i * row_width(), bytes);
    });
  }

  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    StripeGuard rows(stripes_, ~uint64_t{0}, /*exclusive=*/false);
    for (int64_t slot = 0; slot < slots_used_; ++slot) {
      if (Meta(slot)->id >= 0) TESSERA_RETURN_IF_ERROR(fn(Meta(slot)->id, Row(slot)));
    }
    return below_->ForEach([&](int64_t id, const float* row) {
      return Find(id, Hash(id)) >= 0 ? Status::OK() : fn(id, row);  // the resident copy was visited
    });
  }

  int64_t size() const override {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return rows_below_ + resident_only_;
  }

  RowStoreStats Stats() const override {
    RowStoreStats s;
    TierStats host;
    host.name = "host";
    host.hits = hits_.load(std::memory_order_relaxed);
    host.misses = misses_.load(std::memory_order_relaxed);
    host.evictions = evictions_.load(std::memory_order_relaxed);
    host.writebacks = writebacks_.load(std::memory_order_relaxed);
    host.rows_resident = resident_.load(std::memory_order_relaxed);
    host.bytes_resident = host.rows_resident * row_bytes_;
    host.byte_budget = budget_rows_ * row_bytes_;
    s.tiers.push_back(host);
    int64_t rows_below;
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      rows_below = rows_below_;
    }
    below_->AddStats(rows_below, &s);
    return s;
  }

  Status Flush() override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    StripeGuard rows(stripes_, ~uint64_t{0}, /*exclusive=*/false);
    TESSERA_RETURN_IF_ERROR(WriteBackDirty());
    return below_->Flush();
  }

  Status CheckpointTo(const std::string& dir) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    StripeGuard rows(stripes_, ~uint64_t{0}, /*exclusive=*/false);
    TESSERA_RETURN_IF_ERROR(WriteBackDirty());
    return below_->Checkpoint(dir);
  }

 private:
  // Scratch buffers of a batch, kept per thread between batches.
  struct Scratch {
    std::vector<float*> rows;
    std::vector<SlotMeta*> metas;       // nullptr: not resident (yet)
    std::vector<uint64_t> hashes;
    std::vector<int64_t> missing;       // ids to read from below
    std::vector<int32_t> staged;        // position -> its row in staging/found, or -1
    std::vector<float> staging;         // rows read from below before taking mu_
    std::vector<uint8_t> found;
    std::vector<int32_t> refetch_pos;   // positions read again under mu_, ascending
    std::vector<float> refetched;       // ... and their rows
    std::vector<uint8_t> refetched_found;
  };
  // The thread's Scratch, or a fresh one for a batch nested in another's fn
  // (a shard's fn reading another shard's store).
  class ScratchLease {
   public:
    ScratchLease() : scratch_(depth_ == 0 ? &kept_ : (own_ = std::make_unique<Scratch>()).get()) { ++depth_; }
    ~ScratchLease() { --depth_; }
    Scratch& operator*() const { return *scratch_; }

   private:
    static thread_local Scratch kept_;
    static thread_local int depth_;
    std::unique_ptr<Scratch> own_;
    Scratch* scratch_;
  };

  Status Run(std::span<const int64_t> ids, bool write, const UpdateFn& fn);
  Status RunWithMisses(std::span<const int64_t> ids, bool write, uint64_t stripes, uint64_t tick, uint32_t epoch,
                       const UpdateFn& fn, Scratch& s);
  Status Fetch(std::span<const int64_t> ids, float* rows, uint8_t* found);
  void Touch(SlotMeta* m, uint64_t tick, uint32_t epoch) const;
  static uint64_t Count(const SlotMeta& m, uint32_t epoch);  // kLfuAging: the count as of epoch
  uint64_t Priority(const SlotMeta& m, uint32_t epoch) const;
  Status EvictDownTo(int64_t rows);
  // Writes the dirty ones back, then frees the slots. REQUIRES: mu_ exclusive; none pinned.
  Status Evict(const std::vector<int32_t>& victims);
  Status WriteBackDirty();
  void NoteWrittenBack(std::span<const int64_t> ids);  // REQUIRES: mu_ exclusive
  uint32_t Epoch(int64_t accesses) const { return static_cast<uint32_t>(accesses / halving_accesses_); }

  float* Row(int64_t slot) const {
    return static_cast<float*>(rows_[slot / kChunkRows].data()) + (slot % kChunkRows) * static_cast<int64_t>(row_width());
  }
  SlotMeta* Meta(int64_t slot) const { return &metas_[slot / kChunkRows][slot % kChunkRows]; }
  int64_t Find(int64_t id, uint64_t hash) const;  // REQUIRES: mu_ held
  int64_t Insert(int64_t id, uint64_t hash);       // REQUIRES: mu_ exclusive; id not resident
  void Erase(int64_t slot);                        // REQUIRES: mu_ exclusive
  void Rehash(uint64_t capacity);

  const EvictionPolicy policy_;
  const int64_t row_bytes_;
  const int64_t budget_rows_;
  const int64_t slack_rows_;
  const int64_t halving_accesses_;
  const std::unique_ptr<LowerTier> below_;
  // Ids the tier below may hold: the others are initialized without asking
  // it. Empty (every id asked) where the shard's range is unknown, or its
  // bits would take more than a sixteenth of host_bytes.
  StoredBelowSet below_ids_;
  // kLfuAging: the counts of evicted rows, restored when they are read
  // again. Empty where the bits above are, or where the two would take more
  // than a sixteenth of host_bytes. GUARDED_BY(mu_), held exclusively.
  EvictedCounts evicted_counts_;

  mutable std::shared_mutex mu_;
  mutable std::shared_mutex stripes_[kStripes];
  std::vector<int32_t> table_;                       // GUARDED_BY(mu_): slot or kEmpty
  uint64_t mask_ = 0;                                // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<SlotMeta[]>> metas_;   // GUARDED_BY(mu_) (the vectors; slots are pinned or under mu_)
  std::vector<PageMemory> rows_;                      // GUARDED_BY(mu_): from the kernel, see page_memory.h
  int64_t slots_used_ = 0;                           // GUARDED_BY(mu_): high-water mark
  std::vector<int32_t> free_slots_;                  // GUARDED_BY(mu_)
  int64_t rows_below_;                               // GUARDED_BY(mu_)
  int64_t resident_only_ = 0;                        // GUARDED_BY(mu_): resident, not below
  std::atomic<int64_t> resident_{0};                 // written under mu_ exclusive
  std::atomic<uint64_t> writeback_seq_{0};           // bumped under mu_ exclusive after each write-back
  // The writeback_seq_ of the last write-back of a row hashing to each bucket:
  // a row read from below before that may be stale.
  std::vector<uint64_t> written_at_ = std::vector<uint64_t>(kWrittenBuckets, 0);  // GUARDED_BY(mu_)
  // Rows the last eviction scan found coldest after its victims, coldest
  // first, with the id and tick they had then: the next passes take them
  // while they are untouched, before scanning again.
  struct Queued {
    int32_t slot;
    int64_t id;
    uint64_t tick;
  };
  static constexpr size_t kEvictionQueuePasses = 4;
  std::vector<Queued> queue_;                        // GUARDED_BY(mu_)
  size_t queue_next_ = 0;                            // GUARDED_BY(mu_)
  std::atomic<uint64_t> tick_{0};
  std::atomic<int64_t> accesses_{0};
  std::atomic<int64_t> hits_{0}, misses_{0}, evictions_{0}, writebacks_{0};
};

thread_local TieredRowStore::Scratch TieredRowStore::ScratchLease::kept_;
thread_local int TieredRowStore::ScratchLease::depth_ = 0;

Status TieredRowStore::Run(std::span<const int64_t> ids, bool write, const UpdateFn& fn) {
  const size_t n = ids.size();
  const uint64_t tick = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint32_t epoch =
      Epoch(accesses_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n));
  ScratchLease lease;
  Scratch& s = *lease;
  s.rows.resize(n);
  s.metas.resize(n);
  s.hashes.resize(n);
  uint64_t stripes = 0;
  for (size_t i = 0; i < n; ++i) {
    s.hashes[i] = Hash(ids[i]);
    stripes |= uint64_t{1} << StripeOf(s.hashes[i]);
  }
  {
    // The hit path: every row resident; no eviction can run while mu_ is shared.
    std::shared_lock<std::shared_mutex> lock(mu_);
    size_t i = 0;
    for (; i < n; ++i) {
      const int64_t slot = Find(ids[i], s.hashes[i]);
      if (slot < 0) break;
      s.rows[i] = Row(slot);
      s.metas[i] = Meta(slot);
    }
    if (i == n) {
      for (size_t j = 0; j < n; ++j) Touch(s.metas[j], tick, epoch);
      hits_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
      StripeGuard guard(stripes_, stripes, write);
      fn(s.rows.data(), static_cast<int64_t>(n));
      if (write) {
        for (size_t j = 0; j < n; ++j) s.metas[j]->dirty.store(1, std::memory_order_relaxed);
      }
      return Status::OK();
    }
  }
  return RunWithMisses(ids, write, stripes, tick, epoch, fn, s);
}

Status TieredRowStore::RunWithMisses(std::span<const int64_t> ids, bool write, uint64_t stripes, uint64_t tick,
                                     uint32_t epoch, const UpdateFn& fn, Scratch& s) {
  const size_t n = ids.size();
  const int w = row_width();
  // 1. Which rows are missing; read them from below with no lock held.
  s.missing.clear();
  s.staged.assign(n, -1);
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      if (Find(ids[i], s.hashes[i]) < 0) {
        s.staged[i] = static_cast<int32_t>(s.missing.size());
        s.missing.push_back(ids[i]);
      }
    }
  }
  const uint64_t seq = writeback_seq_.load(std::memory_order_acquire);
  s.staging.resize(s.missing.size() * w);
  s.found.resize(s.missing.size());
  TESSERA_RETURN_IF_ERROR(Fetch(s.missing, s.staging.data(), s.found.data()));

  // 2. Under mu_: pin the resident rows, make room, insert the missing ones.
  std::unique_lock<std::shared_mutex> lock(mu_);
  std::vector<size_t> pinned;
  auto unpin_all = [&] {
    for (size_t i : pinned) s.metas[i]->pins.fetch_sub(1, std::memory_order_release);
  };
  // Read again, now that no write-back can run, the rows missing now but not
  // staged (evicted since the first look) and the staged rows written back
  // since they were read (the staged copy may be older).
  s.missing.clear();
  s.refetch_pos.clear();
  int64_t incoming = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t slot = Find(ids[i], s.hashes[i]);
    if (slot >= 0) {
      s.rows[i] = Row(slot);
      s.metas[i] = Meta(slot);
      s.metas[i]->pins.fetch_add(1, std::memory_order_relaxed);
      pinned.push_back(i);
      continue;
    }
    s.metas[i] = nullptr;
    ++incoming;
    if (s.staged[i] < 0 || written_at_[s.hashes[i] & (kWrittenBuckets - 1)] > seq) {
      s.refetch_pos.push_back(static_cast<int32_t>(i));
      s.missing.push_back(ids[i]);
    }
  }
  if (!s.missing.empty()) {
    s.refetched.resize(s.missing.size() * w);
    s.refetched_found.resize(s.missing.size());
    Status st = Fetch(s.missing, s.refetched.data(), s.refetched_found.data());
    if (!st.ok()) {
      unpin_all();
      return st;
    }
  }
  if (resident_.load(std::memory_order_relaxed) + incoming > budget_rows_) {
    Status st = EvictDownTo(std::max<int64_t>(0, budget_rows_ - incoming - slack_rows_));
    if (!st.ok()) {
      unpin_all();
      return st.WithContext("making room in the host tier");
    }
  }
  int64_t promoted = 0;
  size_t next_refetched = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s.metas[i] != nullptr) continue;  // resident
    const float* row;
    uint8_t found;
    if (next_refetched < s.refetch_pos.size() && static_cast<size_t>(s.refetch_pos[next_refetched]) == i) {
      row = &s.refetched[next_refetched * w];
      found = s.refetched_found[next_refetched++];
    } else {
      row = &s.staging[s.staged[i] * w];
      found = s.found[s.staged[i]];
    }
    int64_t slot = Find(ids[i], s.hashes[i]);  // a duplicate id may be in already
    if (slot < 0) {
      slot = Insert(ids[i], s.hashes[i]);
      SlotMeta* m = Meta(slot);
      if (!evicted_counts_.empty()) {
        m->freq.store(uint64_t{epoch} << 32 | evicted_counts_.Take(ids[i], epoch), std::memory_order_relaxed);
      }
      m->below = found;
      m->dirty.store(0, std::memory_order_relaxed);
      if (found) {
        std::memcpy(Row(slot), row, sizeof(float) * w);
      } else {
        // Exact under mu_ exclusive: no write-back runs, and `found` is no
        // older than the last one of this row.
        below_ids_.Remove(ids[i]);
        options_.init(ids[i], Row(slot));
        ++resident_only_;
      }
      ++promoted;
    }
    s.rows[i] = Row(slot);
    s.metas[i] = Meta(slot);
    s.metas[i]->pins.fetch_add(1, std::memory_order_relaxed);
    pinned.push_back(i);
  }
  for (size_t i = 0; i < n; ++i) Touch(s.metas[i], tick, epoch);
  hits_.fetch_add(static_cast<int64_t>(n) - promoted, std::memory_order_relaxed);
  misses_.fetch_add(promoted, std::memory_order_relaxed);
  lock.unlock();

  // 3. fn on the pinned rows; eviction passes them by.
  {
    StripeGuard guard(stripes_, stripes, write);
    fn(s.rows.data(), static_cast<int64_t>(n));
    if (write) {
      for (size_t i = 0; i < n; ++i) s.metas[i]->dirty.store(1, std::memory_order_relaxed);
    }
  }
  unpin_all();

  // 4. A batch bigger than the room left the budget exceeded: evict now. A
  // failure keeps the rows in memory; the next batch that needs room retries
  // the write-back and reports it.
  if (resident_.load(std::memory_order_relaxed) > budget_rows_) {
    lock.lock();
    Status st = EvictDownTo(std::max<int64_t>(0, budget_rows_ - slack_rows_));
    if (!st.ok()) LOG(WARNING) << "host tier over budget: " << st;
  }
  return Status::OK();
}

Status TieredRowStore::Fetch(std::span<const int64_t> ids, float* rows, uint8_t* found) {
  if (ids.empty()) return Status::OK();
  if (below_ids_.empty()) return below_->Fetch(ids, rows, found);
  // Ask below only for the ids it may hold, at the front of rows and found,
  // then move each answer out to its own place (back to front: an answer's
  // place is never before its slot in the front).
  thread_local std::vector<int64_t> asked;
  thread_local std::vector<size_t> where;
  asked.clear();
  where.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (below_ids_.MayHold(ids[i])) {
      asked.push_back(ids[i]);
      where.push_back(i);
    }
  }
  if (asked.size() == ids.size()) return below_->Fetch(ids, rows, found);
  if (!asked.empty()) TESSERA_RETURN_IF_ERROR(below_->Fetch(asked, rows, found));
  const size_t w = static_cast<size_t>(row_width());
  size_t next = ids.size();
  for (size_t k = asked.size(); k-- > 0;) {
    const size_t to = where[k];
    for (; next > to + 1; --next) found[next - 1] = 0;
    found[to] = found[k];
    if (to != k && found[k]) std::memcpy(rows + to * w, rows + k * w, sizeof(float) * w);
    next = to;
  }
  for (; next > 0; --next) found[next - 1] = 0;
  return Status::OK();
}

void TieredRowStore::Touch(SlotMeta* m, uint64_t tick, uint32_t epoch) const {
  m->tick.store(tick, std::memory_order_relaxed);
  if (policy_ != EvictionPolicy::kLfuAging) return;
  // Counts halve once per epoch: a count from k epochs ago is worth count >> k.
  // Racing touches may lose an increment; the count is a heuristic.
  const uint64_t count = std::min<uint64_t>(Count(*m, epoch) + 1, 0xffffffffu);
  m->freq.store(uint64_t{epoch} << 32 | count, std::memory_order_relaxed);
}

uint64_t TieredRowStore::Count(const SlotMeta& m, uint32_t epoch) {
  const uint64_t f = m.freq.load(std::memory_order_relaxed);
  const uint32_t then = static_cast<uint32_t>(f >> 32);
  return epoch - then >= 32 ? 0 : (f & 0xffffffffu) >> (epoch - then);
}

uint64_t TieredRowStore::Priority(const SlotMeta& m, uint32_t epoch) const {
  const uint64_t tick = m.tick.load(std::memory_order_relaxed);
  if (policy_ == EvictionPolicy::kLru) return tick;
  const uint64_t count = Count(m, epoch);
  // Count first, then recency among equal counts.
  return std::min<uint64_t>(count, (uint64_t{1} << 23) - 1) << 40 | (tick & ((uint64_t{1} << 40) - 1));
}

Status TieredRowStore::EvictDownTo(int64_t rows) {
  const int64_t want = resident_.load(std::memory_order_relaxed) - rows;
  if (want <= 0) return Status::OK();
  // First the rows the last scan found coldest after its victims, if no
  // batch has touched them since (a touch changes their tick) and none holds
  // them now.
  std::vector<int32_t> victims;
  while (static_cast<int64_t>(victims.size()) < want && queue_next_ < queue_.size()) {
    const Queued& q = queue_[queue_next_++];
    const SlotMeta& m = *Meta(q.slot);
    // acquire: a batch's writes to the row happen before its unpin.
    if (m.id == q.id && m.tick.load(std::memory_order_relaxed) == q.tick &&
        m.pins.load(std::memory_order_acquire) == 0) {
      victims.push_back(q.slot);
    }
  }
  TESSERA_RETURN_IF_ERROR(Evict(victims));
  const int64_t need = want - static_cast<int64_t>(victims.size());
  if (need <= 0) return Status::OK();

  // Then a scan of every resident row: the `need` coldest go, and the next
  // coldest are kept for the next passes, so that a scan (and its selection
  // among every resident row, under the exclusive lock) runs once per
  // kEvictionQueuePasses passes, not at each.
  const uint32_t epoch = Epoch(accesses_.load(std::memory_order_relaxed));
  std::vector<std::pair<uint64_t, int32_t>> candidates;
  candidates.reserve(static_cast<size_t>(resident_.load(std::memory_order_relaxed)));
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    const SlotMeta& m = *Meta(slot);
    if (m.id >= 0 && m.pins.load(std::memory_order_acquire) == 0) {
      candidates.emplace_back(Priority(m, epoch), static_cast<int32_t>(slot));
    }
  }
  const size_t keep = std::min(candidates.size(), static_cast<size_t>(need) * kEvictionQueuePasses);
  if (candidates.size() > keep) {
    std::nth_element(candidates.begin(), candidates.begin() + keep, candidates.end());
    candidates.resize(keep);
  }
  const size_t now = std::min(candidates.size(), static_cast<size_t>(need));
  // Coldest first: the victims, then the queue in the order it is used.
  std::sort(candidates.begin(), candidates.end());
  victims.clear();
  queue_.clear();
  queue_next_ = 0;
  for (size_t k = 0; k < candidates.size(); ++k) {
    const int32_t slot = candidates[k].second;
    if (k < now) {
      victims.push_back(slot);
    } else {
      const SlotMeta& m = *Meta(slot);
      queue_.push_back({slot, m.id, m.tick.load(std::memory_order_relaxed)});
    }
  }
  return Evict(victims);
}

Status TieredRowStore::Evict(const std::vector<int32_t>& victims) {
  std::vector<int64_t> ids;
  std::vector<const float*> rows_out;
  for (const int32_t slot : victims) {
    if (Meta(slot)->dirty.load(std::memory_order_relaxed)) {
      ids.push_back(Meta(slot)->id);
      rows_out.push_back(Row(slot));
    }
  }
  if (!ids.empty()) {
    TESSERA_RETURN_IF_ERROR(below_->Store(ids, rows_out.data()));
    NoteWrittenBack(ids);
  }
  const uint32_t epoch = Epoch(accesses_.load(std::memory_order_relaxed));
  for (const int32_t slot : victims) {
    SlotMeta* m = Meta(slot);
    if (!evicted_counts_.empty()) evicted_counts_.Save(m->id, Count(*m, epoch), epoch);
    if (!m->below) {
      --resident_only_;
      if (m->dirty.load(std::memory_order_relaxed)) ++rows_below_;  // written just now
    }
    Erase(slot);
  }
  evictions_.fetch_add(static_cast<int64_t>(victims.size()), std::memory_order_relaxed);
  return Status::OK();
}

void TieredRowStore::NoteWrittenBack(std::span<const int64_t> ids) {
  for (int64_t id : ids) below_ids_.Add(id);  // before the release below: see stored_below_set.h
  const uint64_t seq = writeback_seq_.fetch_add(1, std::memory_order_release) + 1;
  for (int64_t id : ids) written_at_[Hash(id) & (kWrittenBuckets - 1)] = seq;
  writebacks_.fetch_add(static_cast<int64_t>(ids.size()), std::memory_order_relaxed);
}

Status TieredRowStore::WriteBackDirty() {
  // In chunks, so a huge flush does not build one huge WriteBatch; the rows of
  // a chunk that was written are clean even if a later chunk fails.
  constexpr size_t kChunk = 1 << 14;
  std::vector<int64_t> ids;
  std::vector<int64_t> slots;
  std::vector<const float*> rows_out;
  auto write = [&]() -> Status {
    if (ids.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(below_->Store(ids, rows_out.data()));
    NoteWrittenBack(ids);
    for (int64_t slot : slots) {
      SlotMeta* m = Meta(slot);
      m->dirty.store(0, std::memory_order_relaxed);
      if (!m->below) {
        m->below = 1;
        --resident_only_;
        ++rows_below_;
      }
    }
    ids.clear();
    slots.clear();
    rows_out.clear();
    return Status::OK();
  };
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    const SlotMeta& m = *Meta(slot);
    if (m.id < 0 || !m.dirty.load(std::memory_order_relaxed)) continue;
    ids.push_back(m.id);
    slots.push_back(slot);
    rows_out.push_back(Row(slot));
    if (ids.size() == kChunk) TESSERA_RETURN_IF_ERROR(write());
  }
  return write();
}

int64_t TieredRowStore::Find(int64_t id, uint64_t hash) const {
  for (uint64_t pos = hash & mask_;; pos = (pos + 1) & mask_) {
    const int32_t slot = table_[pos];
    if (slot == kEmpty) return -1;
    if (Meta(slot)->id == id) return slot;
  }
}

int64_t TieredRowStore::Insert(int64_t id, uint64_t hash) {
  int64_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = slots_used_++;
    CHECK_LT(slot, int64_t{std::numeric_limits<int32_t>::max()});
    if (slot / kChunkRows >= static_cast<int64_t>(rows_.size())) {
      metas_.emplace_back(new SlotMeta[kChunkRows]);
      const size_t bytes = static_cast<size_t>(kChunkRows) * row_width() * sizeof(float);
      PageMemory chunk = PageMemory::Map(bytes, false);
      CHECK(!chunk.empty()) << "out of memory for " << bytes << " bytes of rows";
      rows_.push_back(std::move(chunk));
    }
  }
  SlotMeta* m = Meta(slot);
  m->id = id;
  m->pins.store(0, std::memory_order_relaxed);
  m->freq.store(0, std::memory_order_relaxed);
  uint64_t pos = hash & mask_;
  while (table_[pos] != kEmpty) pos = (pos + 1) & mask_;
  table_[pos] = static_cast<int32_t>(slot);
  resident_.fetch_add(1, std::memory_order_relaxed);
  // Keep the load factor under 1/2 so probes stay short.
  if (static_cast<uint64_t>(resident_.load(std::memory_order_relaxed)) * 2 > mask_ + 1) Rehash((mask_ + 1) * 2);
  return slot;
}

void TieredRowStore::Erase(int64_t slot) {
  SlotMeta* m = Meta(slot);
  uint64_t pos = Hash(m->id) & mask_;
  while (table_[pos] != slot) pos = (pos + 1) & mask_;
  // Backward-shift deletion: pull later entries of the probe run into the
  // hole when their home position allows, so no tombstones build up.
  table_[pos] = kEmpty;
  for (uint64_t next = (pos + 1) & mask_; table_[next] != kEmpty; next = (next + 1) & mask_) {
    const uint64_t home = Hash(Meta(table_[next])->id) & mask_;
    if (((next - home) & mask_) >= ((next - pos) & mask_)) {
      table_[pos] = table_[next];
      table_[next] = kEmpty;
      pos = next;
    }
  }
  m->id = -1;
  m->dirty.store(0, std::memory_order_relaxed);
  m->below = 0;
  free_slots_.push_back(static_cast<int32_t>(slot));
  resident_.fetch_sub(1, std::memory_order_relaxed);
}

void TieredRowStore::Rehash(uint64_t capacity) {
  table_.assign(capacity, kEmpty);
  mask_ = capacity - 1;
  for (int64_t slot = 0; slot < slots_used_; ++slot) {
    if (Meta(slot)->id < 0) continue;
    uint64_t pos = Hash(Meta(slot)->id) & mask_;
    while (table_[pos] != kEmpty) pos = (pos + 1) & mask_;
    table_[pos] = static_cast<int32_t>(slot);
  }
}

}  // namespace

int64_t HostTierBytesPerRow(int row_width) {
  // The row, its SlotMeta, and ~2-4 int32 map entries (load factor 1/4..1/2).
  return static_cast<int64_t>(sizeof(float)) * row_width + static_cast<int64_t>(sizeof(SlotMeta)) + 12;
}

std::unique_ptr<LowerTier> NewRocksLowerTier(std::unique_ptr<RowDb> db) {
  return std::make_unique<RocksLowerTier>(std::move(db));
}

StatusOr<std::unique_ptr<RowStore>> OpenTieredRowStore(const TieredRowStoreOptions& options) {
  const RowStoreOptions& r = options.rows;
  if (r.row_width <= 0 || r.gather_cols < 0 || r.gather_cols > r.row_width || !r.init) {
    return Status::InvalidArgument("tiered row store " + options.db.path +
                                   ": needs row_width > 0, 0 <= gather_cols <= row_width and an initializer");
  }
  if (options.host_bytes < 0 || !(options.eviction_slack >= 0 && options.eviction_slack < 1) ||
      options.write_back_buffer_bytes < 0) {
    return Status::InvalidArgument("tiered row store " + options.db.path +
                                   ": needs host_bytes >= 0, 0 <= eviction_slack < 1 and write_back_buffer_bytes >= 0");
  }
  const bool buffered = options.write_back_buffer_bytes > 0;
  RowDbOptions db_options = options.db;
  db_options.sorted_writes = buffered;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::Open(db_options, r.row_width));
  std::unique_ptr<LowerTier> below = NewRocksLowerTier(std::move(db));
  if (buffered) {
    below = NewWriteBackBufferTier(std::move(below), "row db " + options.db.path,
                                   static_cast<size_t>(options.write_back_buffer_bytes), r.row_width);
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t rows_below, below->CountRows());
  return std::unique_ptr<RowStore>(std::make_unique<TieredRowStore>(options, std::move(below), rows_below));
}

}  // namespace tessera
