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
  // Dirty rows evicted from host memory wait in write-back buffers of this
  // many bytes (split among the shards like host_bytes, at least 1 MiB each
  // or all of it if less; two buffers a shard at most) and reach RocksDB in id order from a thread
  // of their own (ps/write_back_buffer.h). 0: written to RocksDB at eviction.
  int64_t write_back_bytes = int64_t{32} << 20;
  // Room the RocksDB tier leaves free on its disk: writes stop short of it
  // (RowDbOptions::reserved_disk_bytes).
  int64_t rocksdb_reserved_bytes = int64_t{64} << 20;
  // Checkpoints hard-link the RocksDB tier's files where they can instead
  // of owning their bytes (RowDbOptions::checkpoint_hard_links).
  bool rocksdb_checkpoint_hard_links = false;
  // Rows kept only in memory (no rocksdb_path) on transparent huge pages
  // (RowStoreOptions::huge_pages).
  bool huge_pages = false;

  // The GPU tier (ps/device_row_store.h) on CUDA device gpu_device (-1: no
  // GPU tier): gpu_bytes of device memory for the hottest rows, split among
  // the shards by size, over the tiers above.
  int gpu_device = -1;
  int64_t gpu_bytes = 0;
  // Runs the GPU tier's logic with its slots in host memory (the host
  // SlotTable) instead of on gpu_device: how the tier is tested, end to end,
  // on machines without a GPU. Needs gpu_bytes > 0.
  bool gpu_tier_on_host = false;
  // The GPU tier gives a shard no fewer slots than this (or than its rows, if
  // fewer), whatever its share of gpu_bytes: a request's distinct rows of one
  // shard must fit in its tier at once, so a small table with a small share
  // would otherwise fail every lookup.
  int64_t gpu_min_slots = 16384;
};

// Slots of a shard's GPU tier: its share of gpu_bytes in rows, at least
// min_slots, at most its rows (then the tier holds the whole shard).
int64_t GpuTierSlots(int64_t gpu_bytes, double memory_share, int row_width, int64_t num_rows, int64_t min_slots);

// Sets options' GPU tier from a parameter server's flags: `device` is what
// --device resolved to (-1: the CPU; `device_spec` is the flag itself),
// gpu_bytes the --gpu_bytes flag (0 on a GPU: half the device's free memory
// at start, so servers and trainers sharing a GPU leave each other room).
// InvalidArgument for a GPU tier asked of a CPU server, negative bytes, or
// gpu_tier_on_host without gpu_bytes.
Status ConfigureGpuTier(const std::string& device_spec, int device, int64_t gpu_bytes, bool gpu_tier_on_host,
                        ShardStorageOptions* options);

// Each shard gets host memory (over RocksDB when rocksdb_path is set:
// ps/tiered_row_store.h; on huge pages when asked for), under a GPU tier when
// one is asked for.
RowStoreFactory MakeRowStoreFactory(const ShardStorageOptions& options);

// The bytes of rows a server holds by default, for the planner, when
// --memory_bytes is not given: with RocksDB under the rows, no limit (they
// spill to disk); in memory, 80% of this machine's memory (MemTotal), so
// that a plan that cannot fit is refused at the start, saying by how much,
// instead of a server running out of memory later. 0 when it cannot tell.
int64_t DefaultMemoryBudget(const ShardStorageOptions& storage);

}  // namespace tessera
