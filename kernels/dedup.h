// Deduplication of ids: the first step of every lookup and gradient push, so a
// row is gathered once and updated once per request however often it appears.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::kernels {

// Reusable: keeps its hash-table scratch between calls, so a server thread that
// dedups every request allocates only when a request is larger than any before.
// Not thread-safe; use one per thread.
class IdDeduper {
 public:
  // unique:  the distinct ids in first-seen order (deterministic).
  // inverse: inverse[i] is the position of ids[i] in `unique`.
  // Both are overwritten. REQUIRES: ids.size() < 2^31.
  void Run(std::span<const int64_t> ids, std::vector<int64_t>* unique, std::vector<int32_t>* inverse);
  // The same while there are at most `max_unique` distinct ids; returns false
  // (and leaves unique and inverse unspecified) as soon as there are more, so
  // that asking "are there few?" of a batch with many costs little.
  bool RunAtMost(std::span<const int64_t> ids, size_t max_unique, std::vector<int64_t>* unique,
                 std::vector<int32_t>* inverse);

 private:
  std::vector<int64_t> keys_;
  std::vector<int32_t> slots_;  // -1 = empty, else index into unique
};

}  // namespace tessera::kernels
