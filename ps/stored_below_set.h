// StoredBelowSet: one bit per id of a shard's range, set once the tier below
// (the write-back buffer, then RocksDB) may hold that row.
//
// Why: half the misses of a tiered shard are rows no batch has touched
// before (W1 over 300 steps: 562,082 of 1,136,372 lookups below found
// nothing). Each asked the write-back buffers and RocksDB's memtables and
// filters for a row that cannot be there. With this set the host tier
// initializes such rows at once and asks below only for ids whose bit is set.
//
// A set bit means "may be below"; a clear bit means "certainly not". So a
// row's bit must be set before any other thread can learn that the row was
// written below (the tiered store sets the bits before it publishes its
// write-back sequence number, with release order). Ids outside the range, and every id
// of an empty set, may be below.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "ps/page_memory.h"

namespace tessera {

class StoredBelowSet {
 public:
  StoredBelowSet() = default;  // knows nothing: every id may be below

  // Over [begin, end), every bit clear (a new store), or every bit set
  // (a store opened over rows whose ids it does not know yet; Remove clears
  // them as lookups find rows absent). Empty where the range is empty or its
  // memory cannot be had.
  static StoredBelowSet Over(int64_t begin, int64_t end, bool all_below) {
    StoredBelowSet s;
    if (end <= begin) return s;
    const size_t words = static_cast<size_t>((end - begin + 63) / 64);
    s.bits_ = PageMemory::Map(words * sizeof(uint64_t), false);
    if (s.bits_.empty()) return s;
    if (all_below) std::memset(s.bits_.data(), 0xff, words * sizeof(uint64_t));
    s.begin_ = begin;
    s.end_ = end;
    return s;
  }
  // Bytes the bits take for a range of `ids` ids.
  static int64_t BytesFor(int64_t ids) { return ids <= 0 ? 0 : (ids + 63) / 64 * 8; }

  bool empty() const { return bits_.empty(); }

  bool MayHold(int64_t id) const {
    if (!InRange(id)) return true;
    return (Word(id).load(std::memory_order_relaxed) >> Bit(id)) & 1;
  }
  void Add(int64_t id) {
    if (InRange(id)) Word(id).fetch_or(uint64_t{1} << Bit(id), std::memory_order_relaxed);
  }
  // REQUIRES: no Add of `id` can race with this (the caller holds its store's lock).
  void Remove(int64_t id) {
    if (InRange(id)) Word(id).fetch_and(~(uint64_t{1} << Bit(id)), std::memory_order_relaxed);
  }

 private:
  bool InRange(int64_t id) const { return !bits_.empty() && id >= begin_ && id < end_; }
  std::atomic_ref<uint64_t> Word(int64_t id) const {
    return std::atomic_ref<uint64_t>(static_cast<uint64_t*>(bits_.data())[(id - begin_) / 64]);
  }
  int Bit(int64_t id) const { return static_cast<int>((id - begin_) % 64); }

  PageMemory bits_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
};

}  // namespace tessera
