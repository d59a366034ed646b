// Which row store a parameter server gives its shards, from its flags.
#pragma once

#include <cstdint>
#include <string>

#include "ps/row_store.h"

namespace tessera {

struct ShardStorageOptions {
  // Where shards keep the rows that do not fit in host memory (one RocksDB
  // database per shard under it, started empty). "" keeps every row in host
  // memory, with no limit.
  std::string rocksdb_path;
  // Host memory for rows when rocksdb_path is set, split among the server's
  // shards by their size. Rows beyond it live in RocksDB.
  int64_t host_bytes = int64_t{1} << 30;
};

// Null (memory stores) when rocksdb_path is empty, else tiered stores:
// host memory over RocksDB (ps/tiered_row_store.h).
RowStoreFactory MakeRowStoreFactory(const ShardStorageOptions& options);

}  // namespace tessera
