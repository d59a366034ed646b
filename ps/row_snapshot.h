// Snapshots of a row store, for checkpoints (DESIGN.md §6).
//
// A snapshot is a directory:
//   <dir>/          a RocksDB database of the rows, encoded as in rocks_row_store.h
//                   (key: row id, fixed64 big-endian; value: the full row, float32 LE)
//   <dir>/meta.json the caller's metadata (step, plan version, table, shard, ...),
//                   written last and atomically (rename), so a snapshot without
//                   it is incomplete: a crash mid-write, never to be read.
// Rows are full rows (embedding and optimizer state). Rows whose value is
// still their initial value may be absent; a reader initializes them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "ps/row_store.h"

namespace tessera {

// Writes every materialized row of `store` to a new snapshot at `dir` (which
// must not exist; its parent must). A RocksDB or tiered store writes back its
// dirty rows and checkpoints its database (hard links: cheap); any other store
// is copied row by row (ForEach). Writers to the store wait while it runs.
// On error the directory may hold a partial database but no meta.json.
Status WriteSnapshot(RowStore& store, const std::string& dir, const nlohmann::json& meta);

// Calls fn for every row of the snapshot with id in [row_begin, row_end), in
// id order, until fn returns an error (returned). Opens the snapshot read-only.
// An incomplete snapshot (no meta.json) is kFailedPrecondition; rows of
// different widths or a malformed row, kDataLoss.
Status ScanSnapshot(const std::string& dir, int64_t row_begin, int64_t row_end,
                    const std::function<Status(int64_t id, const float* row, int width)>& fn);

// The meta.json of a complete snapshot.
StatusOr<nlohmann::json> ReadSnapshotMeta(const std::string& dir);

}  // namespace tessera
