// The tiered row store (DESIGN.md §6): hot rows in host memory under a byte
// budget, every other row in RocksDB.
//
// A row lives in host memory once touched (read from RocksDB, or initialized
// if it was never written) and is "dirty" once updated. When the resident rows
// exceed the budget, the coldest unpinned rows are evicted: dirty ones are
// written back to RocksDB first (write-back; the optimizer state travels in
// the same value), clean ones are dropped. A row read again is promoted back.
//
// Tiers stack GPU -> host -> RocksDB. The host tier talks to the tier below
// through LowerTier (fetch misses, store dirty victims, flush, checkpoint):
// RocksDB, by default behind a write-back buffer (ps/write_back_buffer.h),
// itself a LowerTier over the RocksDB one. The GPU tier, when it comes, is a cache
// over a LowerTier as well: the host tier implements LowerTier for it (Fetch
// hands out resident rows and promotes misses, Store takes the GPU's dirty
// victims as dirty rows) and OpenTieredRowStore stacks the three. Stats()
// lists tiers fastest first, so a GPU entry slots in at the front.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "ps/rocks_row_store.h"
#include "ps/row_store.h"
#include "ps/row_store_stats.h"

namespace tessera {

// The tier below a cache tier. Methods may be called concurrently.
class LowerTier {
 public:
  virtual ~LowerTier() = default;
  // For each i: if row ids[i] is stored here, copies it to rows + i * width
  // and sets found[i] = 1; else found[i] = 0.
  virtual Status Fetch(std::span<const int64_t> ids, float* rows, uint8_t* found) = 0;
  // Stores the rows (dirty rows evicted or flushed from above), all or nothing.
  virtual Status Store(std::span<const int64_t> ids, const float* const* rows) = 0;
  // Visits every row stored here, in id order, until fn fails.
  virtual Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) = 0;
  // Rows stored here (called once, at open; the tier above keeps count after).
  virtual StatusOr<int64_t> CountRows() = 0;
  // Makes what Store wrote durable.
  virtual Status Flush() = 0;
  // A RocksDB checkpoint of everything stored here (and below) at `dir`.
  virtual Status Checkpoint(const std::string& dir) = 0;
  // Appends this tier's (and those below's) entries to stats->tiers, and its
  // traffic; `rows_stored` is the count the tier above keeps.
  virtual void AddStats(int64_t rows_stored, RowStoreStats* stats) const = 0;
};

std::unique_ptr<LowerTier> NewRocksLowerTier(std::unique_ptr<RowDb> db);

enum class EvictionPolicy {
  kLru,       // evict the rows touched longest ago
  kLfuAging,  // evict the rows touched least often (counts halve periodically), oldest first among equals
};

struct TieredRowStoreOptions {
  RowStoreOptions rows;  // REQUIRES: row_width > 0, init set
  RowDbOptions db;       // the RocksDB tier
  // Host memory for resident rows, HostTierBytesPerRow(row_width) each (the
  // row, its bookkeeping and its share of the hash table). A batch that
  // touches more rows than fit still runs: the budget is exceeded while it
  // does, and cold rows are evicted right after it.
  int64_t host_bytes = int64_t{1} << 30;
  // tier_bench (Zipf 1.05, table 10x the budget): LFU with ageing keeps the
  // hot rows slightly better than LRU (host hit rate 84.2% vs 83.5%, so 4%
  // fewer RocksDB reads and writes, the costly part) at the same cost per hit.
  EvictionPolicy policy = EvictionPolicy::kLfuAging;
  // An eviction pass scans every resident row to pick the victims, so it
  // frees this fraction of the budget beyond what is needed, for the next
  // batches. Larger: fewer passes, less of the budget used.
  double eviction_slack = 1.0 / 32;
  // kLfuAging: every count halves after this many row accesses, so rows hot
  // long ago fade. 0: sixteen times the rows the budget holds. Smaller: adapts
  // faster to a shifting hot set, remembers less of a stable one.
  int64_t lfu_halving_accesses = 0;
  // Dirty victims go to a buffer of this many bytes, which a thread writes to
  // RocksDB in id order (ps/write_back_buffer.h): write-back off the host
  // tier's lock, and a flush without a sort. Two such buffers at most, like
  // RocksDB's memtables not part of host_bytes; db.write_buffer_bytes should
  // hold one. 0: victims go straight to RocksDB, under the lock.
  int64_t write_back_buffer_bytes = 32 << 20;
};

// Host bytes one resident row costs (approximate: the hash table's share varies with its load).
int64_t HostTierBytesPerRow(int row_width);

// Opens (per options.db.mode) the RocksDB tier and puts an empty host tier
// over it. Thread safety as RowStore: batches whose rows are all resident
// (hits) take the store's lock shared, so they run side by side; misses read
// RocksDB with no lock held; promotion and eviction take the lock exclusively
// (including the hand-over of dirty victims to the write-back buffer, a
// copy; without the buffer, their write to RocksDB: milliseconds for a batch
// of a thousand victims). Rows are locked for fn by 64 id-hashed
// stripes (readers shared, writers exclusive), so no reader sees half an
// update. fn must not call back into the same store. RocksDB's own memory
// (memtable, block cache: RowDbOptions) and the write-back buffer are not
// part of host_bytes.
//
// Write-back errors (RocksDB full, failing disk): a batch that needs room and
// cannot write back its victims returns the error without running fn, and the
// victims stay in memory, dirty; so does a failed Flush. (With the buffer,
// victims go to memory until a buffer's write fails: the batch that then
// needs the buffer's room gets that error.) Nothing is dropped
// that is not on disk. The destructor flushes and logs a failure: call Flush()
// first to see it.
//
// Stats() reports tiers {"host", "rocksdb"}; Flush() writes back every dirty
// row and flushes RocksDB's memtable. size() counts rows in RocksDB plus rows
// resident and not in RocksDB (a row only read is dropped when evicted, since
// its value is its initial value: size() may shrink).
StatusOr<std::unique_ptr<RowStore>> OpenTieredRowStore(const TieredRowStoreOptions& options);

}  // namespace tessera
