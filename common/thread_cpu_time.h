// CPU time the calling thread has used. Unlike a wall clock it does not count
// the time the thread waited for a core (other processes, other threads) or
// slept on a lock, so it says what a piece of work cost on a shared machine.
#pragma once

#include <cstdint>
#include <ctime>

namespace tessera {

inline int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline double ThreadCpuSeconds() { return 1e-9 * static_cast<double>(ThreadCpuNanos()); }

}  // namespace tessera
