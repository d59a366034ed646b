// CPU row sums for merging pushes (see the header). As in the embedding bag's
// backward, dst is not zeroed up front: rows are zeroed only when the index
// passes over them, and a row's first contribution writes 0 + x (not x, so
// that a -0 comes out as +0, as adding it to a zeroed row gives).
#include "kernels/row_sum.h"

#include <glog/logging.h>

#include <cstring>

namespace tessera::kernels {
namespace {

void AddRow(int dim, const float* __restrict src, float* __restrict dst) {
  for (int c = 0; c < dim; ++c) dst[c] += src[c];
}

void WriteRow(int dim, const float* __restrict src, float* __restrict dst) {
  for (int c = 0; c < dim; ++c) dst[c] = 0.0f + src[c];
}

}  // namespace

void SumRowsByIndexCpu(int dim, std::span<const RowRun> runs, const int32_t* index, int64_t num_rows, float* dst) {
  DCHECK_GT(dim, 0);
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  // Rows [0, written) hold sums so far; a row at or past it is reached for
  // the first time.
  int64_t written = 0;
  int64_t k = 0;
  for (const RowRun& run : runs) {
    for (int64_t i = 0; i < run.n; ++i, ++k) {
      const int64_t u = index[k];
      DCHECK(u >= 0 && u < num_rows) << "index " << k << " = " << u;
      const float* src = run.rows + i * dim;
      float* row = dst + u * dim;
      if (u < written) {
        AddRow(dim, src, row);
        continue;
      }
      if (u > written) std::memset(dst + written * dim, 0, static_cast<size_t>(u - written) * row_bytes);
      written = u + 1;
      WriteRow(dim, src, row);
    }
  }
  if (written < num_rows) std::memset(dst + written * dim, 0, static_cast<size_t>(num_rows - written) * row_bytes);
}

}  // namespace tessera::kernels
