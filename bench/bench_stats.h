// What the benches measure with: the whole process's CPU time and the median
// of repeated runs. On these shared machines wall time moves with other
// tenants' load; CPU time and medians of alternating rounds move less.
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace tessera::bench {

// CPU seconds of every thread of this process (background threads, ZeroMQ's
// and Gloo's I/O threads, RocksDB's compactions included).
inline double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// REQUIRES: !v.empty(). The upper median for an even count.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace tessera::bench
