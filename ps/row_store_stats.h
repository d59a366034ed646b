// RowStoreStats: what a RowStore's tiers hold and how often each is hit, for
// the shard's status page and the tier benchmark (DESIGN.md §6).
//
// A plain value: RowStore::Stats() fills one from counters the store keeps
// (relaxed atomics), so two fields of one snapshot may be a few operations
// apart under concurrent use. Counters count rows, not batches, since the
// store was opened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

struct TierStats {
  std::string name;          // "memory", "host", "rocksdb" (later "gpu")
  int64_t hits = 0;          // rows looked up and found in this tier
  int64_t misses = 0;        // rows looked up and not found here (fetched below, or initialized)
  int64_t evictions = 0;     // rows moved out of this tier to make room
  int64_t writebacks = 0;    // evicted or flushed rows that were dirty, written to the tier below
  int64_t rows_resident = 0;
  int64_t bytes_resident = 0;  // memory tiers: rows and their bookkeeping; rocksdb: encoded rows
  int64_t byte_budget = 0;     // 0: unbounded
};

struct RowStoreStats {
  std::vector<TierStats> tiers;  // fastest first, e.g. {host, rocksdb}
  // Traffic to RocksDB: rows read (found: a lookup of an absent row is a
  // miss of the rocksdb tier, not a read) and their value bytes; rows
  // written and the key + value bytes written.
  int64_t rocksdb_rows_read = 0;
  int64_t rocksdb_bytes_read = 0;
  int64_t rocksdb_rows_written = 0;
  int64_t rocksdb_bytes_written = 0;
  // Writes RocksDB stopped or slowed down because compaction fell behind
  // (its column family's io_stalls.total_stop + total_slowdown).
  int64_t rocksdb_write_stalls = 0;

  // The tier called `name`, or nullptr.
  const TierStats* tier(const std::string& name) const {
    for (const TierStats& t : tiers) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
};

}  // namespace tessera
