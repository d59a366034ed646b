// The tier below a tiered store's host memory when rows are written back in
// bulk (DESIGN.md §6): the rows the host tier evicts dirty are kept in a
// buffer in memory and written to RocksDB by a thread of the tier's own, a
// buffer at a time, in id order.
//
// Why: written back a victim batch at a time (a few thousand rows spread over
// the whole table), the rows went into RocksDB's hash memtable, which sorts
// them at flush by building a skip list: a fifth of a tiered job's CPU on W1.
// In id order, a buffer's rows fill a skip-list memtable front to back and
// flush without a sort; and the write itself no longer runs under the host
// tier's exclusive lock (Store is a copy into memory).
//
// Reads see the newest value: the buffer being filled, then the one being
// written, then RocksDB. A buffer's rows stay readable until RocksDB has
// them. A failed write (a full disk) keeps them, and is retried by the next
// Store that needs the room, which fails with that write's error if it fails
// again: nothing acknowledged is dropped, as with the unbuffered tier, and
// Flush() writes both buffers and then RocksDB's memtable to disk.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ps/rocks_row_store.h"
#include "ps/tiered_row_store.h"

namespace tessera {

// A buffer over `below` (NewRocksLowerTier, whose database is best opened
// with RowDbOptions::sorted_writes). buffer_bytes: rows (with their ids) a
// buffer holds before it is handed to the writing thread; two buffers exist
// at most. `name` names the tier in logs. REQUIRES: buffer_bytes > 0,
// row_width the rows'.
std::unique_ptr<LowerTier> NewWriteBackBufferTier(std::unique_ptr<LowerTier> below, std::string name,
                                                  size_t buffer_bytes, int row_width);

}  // namespace tessera
