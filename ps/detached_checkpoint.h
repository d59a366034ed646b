// Checkpoints of a RocksDB row database that share no file with the live
// database.
//
// RocksDB's Checkpoint hard-links the live database's SSTs when the
// checkpoint is on the same file system. One damaged block of the spill
// disk then damages the live rows and every checkpoint that links that SST,
// and none is left to recover from (found by damaging a running tiered
// server's SSTs: the job failed with a checksum mismatch, as it should, and
// so did --resume from each of its two checkpoints). DetachFromLive gives
// the checkpoint bytes of its own: each file it shares with the live
// database is replaced by a copy, or by a hard link to the same SST already
// copied into the previous checkpoint (an SST never changes once written, and
// a database never reuses an SST's name), so an SST that did not change is
// copied once. Copies are plain reads and writes: copy_file_range may share
// the blocks (reflinks on XFS and btrfs), which is what this is to avoid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace tessera {

struct DetachStats {
  int files_copied = 0;
  int files_linked = 0;  // to the previous checkpoint's copy
  int64_t bytes_copied = 0;
};

// `checkpoint`: a checkpoint just made of the database at `live`;
// `previous`: this database's last checkpoint made this way, or "" (a
// folder that is gone or holds other files is fine: those files are copied).
// `room(bytes)` runs once, before anything is copied, with the bytes the
// copies will take on the live database's own file system; an error from it
// is returned and nothing is copied (the spill disk keeps the room its
// store reserved). Every copy is synced, and then the checkpoint's folder.
// On error some files may still be links: the caller fails the checkpoint.
Status DetachFromLive(const std::string& live, const std::string& checkpoint, const std::string& previous,
                      const std::function<Status(int64_t bytes)>& room, DetachStats* stats);

}  // namespace tessera
