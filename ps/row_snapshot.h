// Snapshots of a row store, for checkpoints (DESIGN.md §6).
//
// A snapshot is a directory, in one of two forms:
//   <dir>/rows.bin  the rows of a store that lives in memory (the default
//                   store, the GPU tier), copied out in one sequential file:
//                     header  := magic "TSROWS01" | row_width:u32 | reserved:u32 |
//                                num_rows:i64 | checksum:u64       (32 bytes)
//                     rows    := float32[num_rows][row_width], in no order,
//                                zero-padded to a multiple of 8 bytes
//                     ids     := int64[num_rows], row i's id
//                   little-endian; checksum: of everything after the header.
//   <dir>/          or a RocksDB database of the rows (a store backed by RocksDB
//                   checkpoints its own database, sharing no file with it:
//                   ps/detached_checkpoint.h), encoded as in
//                   rocks_row_store.h (key: row id, fixed64 big-endian; value:
//                   the full row, float32 LE)
//   <dir>/meta.json the caller's metadata (step, plan version, table, shard, ...),
//                   written last and atomically (rename), once the rows are on
//                   disk, so a snapshot without it is incomplete: a crash
//                   mid-write, never to be read.
// Rows are full rows (embedding and optimizer state). Rows whose value is
// still their initial value may be absent; a reader initializes them.
//
// rows.bin replaced a RocksDB database for copied stores: inserting every row
// into a memtable and sorting it into SSTs made a checkpoint over 10x slower
// (bench/README.md, "Checkpoint cost"). Readers take both forms.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "ps/row_store.h"

namespace tessera {

// What writing a snapshot took.
struct SnapshotStats {
  int64_t rows = 0;    // rows in the snapshot (for a RocksDB checkpoint: the store's count)
  int64_t bytes = 0;   // bytes of its files (a RocksDB checkpoint's: SSTs it copied or shares with the last one)
  double write_s = 0;  // copying the rows out (or checkpointing the database)
  double sync_s = 0;   // making them durable, meta.json included
};

// Writes every materialized row of `store` to a new snapshot at `dir` (which
// must not exist; its parent must), durably: when it returns OK the files and
// their names in `dir` are on disk (the caller syncs dir's parent). A RocksDB
// or tiered store writes back its dirty rows and checkpoints its database
// (each SST copied once, then shared by later checkpoints: RowDb::Checkpoint);
// any other store is copied (ForEach) into rows.bin.
// Writers to the store wait while it runs. On error the directory may hold a
// partial snapshot but no meta.json.
Status WriteSnapshot(RowStore& store, const std::string& dir, const nlohmann::json& meta,
                     SnapshotStats* stats = nullptr);

// fsync of a directory: makes the names in it durable (files created or
// renamed there).
Status SyncDirectory(const std::string& dir);

// A run of a snapshot's rows: ids[i]'s full row is rows[i * width ..
// (i + 1) * width); the pointers are valid only during the call.
using SnapshotRowsFn = std::function<Status(std::span<const int64_t> ids, const float* rows, int width)>;

// Calls fn for every row of the snapshot with id in [row_begin, row_end), in
// runs of at most kSnapshotRunRows rows, until fn returns an error
// (returned). A rows.bin is read through a mapping, in the order its store
// wrote it, and fn gets the rows where they lie (no copy); a RocksDB
// snapshot goes in id order. Each id comes once: a snapshot's writer visits
// every row of its store once. `expect`, when given, is told how many rows
// are in the range before the first run where the form knows it up front
// (rows.bin: a store about to take them sizes itself once).
// Opens the snapshot read-only. An incomplete snapshot (no meta.json) is
// kFailedPrecondition; rows of different widths, a malformed row, a rows.bin
// that is cut short or fails its checksum, kDataLoss.
constexpr int64_t kSnapshotRunRows = 4096;
Status ScanSnapshot(const std::string& dir, int64_t row_begin, int64_t row_end, const SnapshotRowsFn& fn,
                    const std::function<void(int64_t rows)>& expect = nullptr);

// The meta.json of a complete snapshot.
StatusOr<nlohmann::json> ReadSnapshotMeta(const std::string& dir);

}  // namespace tessera
