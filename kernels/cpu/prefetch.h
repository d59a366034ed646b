// Software prefetch of rows for the CPU kernels. The kernels touch rows of a
// table far larger than the caches in an order no hardware prefetcher can
// guess, so each kernel prefetches the rows it will touch a few steps ahead.
// On 4 KiB pages a random row also costs a page walk, which prefetching hides
// far less well than the DRAM access: on the dev host (a VM) a prefetched
// random 256-byte row took ~100 ns on 4 KiB pages and ~50 ns on 2 MiB pages.
#pragma once

#include <cstdint>

namespace tessera::kernels {

inline constexpr int kCacheLine = 64;

// Prefetches the `bytes` bytes at `p` (any alignment), for writing if
// kForWrite. Instructions only: never faults, whatever `p` is.
template <bool kForWrite>
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kCacheLine - 1};
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{kCacheLine - 1};
  for (uintptr_t line = first; line <= last; line += kCacheLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), kForWrite ? 1 : 0, 3);
  }
}

// The same for kBytes known at compile time: straight-line code, one prefetch
// per 64 bytes from `p` plus one at the last byte, which covers the extra line
// of an unaligned row. Measurably faster than the loop above in the kernels'
// hot loops (the loop's address arithmetic and branch sit on every id).
template <int kBytes, bool kForWrite>
inline void PrefetchFixedBytes(const void* p) {
  static_assert(kBytes > 0);
  const char* c = static_cast<const char*>(p);
#pragma GCC unroll 16
  for (int off = 0; off < kBytes; off += kCacheLine) __builtin_prefetch(c + off, kForWrite ? 1 : 0, 3);
  __builtin_prefetch(c + kBytes - 1, kForWrite ? 1 : 0, 3);
}

}  // namespace tessera::kernels
