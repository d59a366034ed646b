// EvictedCounts: for each id of a shard's range, the LFU count its row had
// when the host tier last evicted it, so that a row read again starts from
// what it had earned instead of from zero.
//
// Why: with counts kept only for resident rows, a row just outside the hot
// set comes back with a count of 1 after each eviction and ranks with the
// rows seen once, so it is evicted again first. Remembering the count keeps
// such rows apart from the one-time ones (a simulation of W1's ids: 4% fewer
// misses; bench/README.md, "Counts remembered across evictions").
//
// One byte per id (counts saturate at 255), halved for every id once per
// epoch, as resident counts are (lazily: when the next count is saved in a
// later epoch). Not thread-safe: the tiered store calls it under its lock
// held exclusively.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ps/page_memory.h"

namespace tessera {

class EvictedCounts {
 public:
  EvictedCounts() = default;  // remembers nothing

  // Over [begin, end), every count 0. Empty where the range is empty or its
  // memory cannot be had.
  static EvictedCounts Over(int64_t begin, int64_t end) {
    EvictedCounts c;
    if (end <= begin) return c;
    c.counts_ = PageMemory::Map(static_cast<size_t>(end - begin), false);
    if (c.counts_.empty()) return c;
    c.begin_ = begin;
    c.end_ = end;
    return c;
  }
  // Bytes the counts take for a range of `ids` ids.
  static int64_t BytesFor(int64_t ids) { return std::max<int64_t>(ids, 0); }

  bool empty() const { return counts_.empty(); }

  // The count `id`'s row had at its last eviction, as of `epoch`; 0 if it
  // has none (never evicted, or faded, or outside the range). Forgets it:
  // the resident row counts from here.
  uint32_t Take(int64_t id, uint32_t epoch) {
    if (!InRange(id)) return 0;
    uint8_t& c = At(id);
    const uint32_t count = epoch > epoch_ ? Faded(c, epoch - epoch_) : c;
    c = 0;
    return count;
  }

  // Remembers `count`, the count of `id`'s row as of `epoch`, as it is evicted.
  void Save(int64_t id, uint64_t count, uint32_t epoch) {
    if (!InRange(id)) return;
    AgeTo(epoch);
    if (epoch < epoch_) count = Faded(count, epoch_ - epoch);  // counted before the last halving
    At(id) = static_cast<uint8_t>(std::min<uint64_t>(count, 255));
  }

 private:
  static uint32_t Faded(uint64_t count, uint32_t epochs) {
    return epochs >= 8 ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, 255) >> epochs);
  }
  // Halves every count once per epoch since the last call.
  void AgeTo(uint32_t epoch) {
    if (epoch <= epoch_) return;
    const uint32_t shift = epoch - epoch_;
    uint8_t* c = static_cast<uint8_t*>(counts_.data());
    const size_t n = static_cast<size_t>(end_ - begin_);
    if (shift >= 8) {
      std::memset(c, 0, n);
    } else {
      for (size_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(c[i] >> shift);
    }
    epoch_ = epoch;
  }
  bool InRange(int64_t id) const { return !counts_.empty() && id >= begin_ && id < end_; }
  uint8_t& At(int64_t id) { return static_cast<uint8_t*>(counts_.data())[id - begin_]; }

  PageMemory counts_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  uint32_t epoch_ = 0;  // the epoch the stored counts are of
};

}  // namespace tessera
