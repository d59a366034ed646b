#include "ps/shard_rows.h"

#include "ps/row_layout.h"
#include "ps/row_snapshot.h"

namespace tessera {

Status MergeRows(EmbeddingShard* shard, std::span<const int64_t> ids, const float* rows, int width, int old_col,
                 int old_cols) {
  const ShardSpec& mine = shard->spec();
  const RowLayout layout = RowLayout::For(shard->table().optimizer.type);
  if (old_col == mine.col_offset && old_cols == mine.num_cols && width == shard->store()->row_width()) {
    // Whole rows of the same columns: stored as they are, without first
    // computing initial values that would be overwritten (the initializer's
    // random numbers were a tenth of a migration's time).
    return shard->store()->Put(ids, rows);
  }
  return shard->store()->Update(ids, [&](float* const* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      CopyRowColumns(layout, &rows[i * width], old_col, old_cols, dst[i], mine.col_offset, mine.num_cols);
    }
  });
}

Status RestoreSnapshotSlice(const std::string& snapshot, int64_t row_begin, int64_t row_end, int old_col,
                            int old_cols, EmbeddingShard* shard, int64_t* restored) {
  const RowLayout layout = RowLayout::For(shard->table().optimizer.type);
  // Each run of rows is merged into this shard's rows (its columns of
  // them), state included, straight from where the snapshot holds it.
  return ScanSnapshot(
      snapshot, row_begin, row_end,
      [&](std::span<const int64_t> ids, const float* rows, int width) -> Status {
        if (width != layout.Width(old_cols)) {
          return Status::DataLoss("checkpoint row of width " + std::to_string(width) +
                                  " does not fit the table's optimizer state");
        }
        TESSERA_RETURN_IF_ERROR(MergeRows(shard, ids, rows, width, old_col, old_cols));
        *restored += static_cast<int64_t>(ids.size());
        return Status::OK();
      },
      [&](int64_t rows) { shard->store()->Reserve(rows); });
}

}  // namespace tessera
