// Per-table storage figures of a whole job: each server reports its shards'
// tiers (hits, misses, evictions, bytes) and RocksDB traffic; a table split
// over many servers is one line here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

// `servers`: the kServerStats replies (one per server; an {"error": ...}
// entry is skipped). Returns {"<table>": {"tiers": {"<tier>": {hits, misses,
// hit_rate, evictions, writebacks, rows, bytes}}, "rocksdb_rows_read": ...,
// "rocksdb_rows_written": ..., "rocksdb_bytes_read": ...,
// "rocksdb_bytes_written": ...}}.
nlohmann::json SummarizeStorage(const nlohmann::json& servers);

// One line per table and tier, for the master's end-of-job report; tables
// held only in memory share one line.
std::string FormatStorageSummary(const nlohmann::json& summary);

}  // namespace tessera
