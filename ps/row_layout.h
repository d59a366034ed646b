// The layout of a stored row — [cols weights | optimizer state] — and how to
// move the columns of one shard's rows into another's, optimizer state
// included. Used when a checkpoint is restored onto a different plan (say 3
// servers instead of 2), where a new column shard may take columns from
// several old ones.
//
// State per optimizer: sgd none; adagrad [cols]; rowwise_adagrad [1];
// adam [cols m | cols v | 1 step]. Per-column state moves with its column;
// per-row state is copied whole from any overlapping shard.
#pragma once

#include <algorithm>
#include <string>

#include "common/job_config.h"

namespace tessera {

struct RowLayout {
  int per_column_blocks = 0;  // state blocks of `cols` floats each
  int per_row_floats = 0;     // state floats per row, after those blocks

  static RowLayout For(const std::string& optimizer) {
    if (optimizer == "adagrad") return {1, 0};
    if (optimizer == "rowwise_adagrad") return {0, 1};
    if (optimizer == "adam") return {2, 1};
    return {0, 0};
  }
  int Width(int cols) const { return cols * (1 + per_column_blocks) + per_row_floats; }
};

// Copies the columns [src_col, src_col + src_cols) ∩ [dst_col, dst_col +
// dst_cols) of the table from a source row to a destination row (weights
// and per-column state), and the per-row state when the ranges overlap.
inline void CopyRowColumns(const RowLayout& layout, const float* src, int src_col, int src_cols, float* dst,
                           int dst_col, int dst_cols) {
  const int lo = std::max(src_col, dst_col), hi = std::min(src_col + src_cols, dst_col + dst_cols);
  if (lo >= hi) return;
  for (int block = 0; block <= layout.per_column_blocks; ++block) {
    const float* s = src + block * src_cols;
    float* d = dst + block * dst_cols;
    for (int c = lo; c < hi; ++c) d[c - dst_col] = s[c - src_col];
  }
  const float* s = src + (1 + layout.per_column_blocks) * src_cols;
  float* d = dst + (1 + layout.per_column_blocks) * dst_cols;
  std::copy(s, s + layout.per_row_floats, d);
}

}  // namespace tessera
