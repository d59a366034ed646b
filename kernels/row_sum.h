// Sums of gradient rows by a dedup's inverse index: how a server merges the
// pushes of a sync step, where several trainers send gradients for the same
// rows and each distinct row is updated once with their sum.
#pragma once

#include <cstdint>
#include <span>

namespace tessera::kernels {

// n rows of some dim, one after another.
struct RowRun {
  const float* rows = nullptr;
  int64_t n = 0;
};

// dst[u] = 0 + the rows k of the runs, taken in order (run 0's first), with
// index[k] == u, added in that order: the same bits as zeroing dst and adding
// every row into it. index holds one entry per row of all runs together, each
// in [0, num_rows); dst is [num_rows x dim] and fully overwritten. Fastest
// when index is in first-seen order (IdDeduper's inverse): then no row of dst
// is zeroed first, and each is written by its first row and updated by the
// rest.
void SumRowsByIndexCpu(int dim, std::span<const RowRun> runs, const int32_t* index, int64_t num_rows, float* dst);

}  // namespace tessera::kernels
