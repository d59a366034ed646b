// Filling a shard with rows that another shard of the same table held (a
// checkpoint's snapshot, or rows a migration fetched): the row slices and
// columns of both may differ (a new plan re-cuts the table).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "ps/embedding_shard.h"

namespace tessera {

// Writes full rows of an old shard (its columns [old_col, old_col +
// old_cols), `width` floats each with their optimizer state) into `shard`'s
// rows, the columns of them it holds.
Status MergeRows(EmbeddingShard* shard, std::span<const int64_t> ids, const float* rows, int width, int old_col,
                 int old_cols);

// Loads the rows with ids in [row_begin, row_end) of the snapshot at
// `snapshot` (an old shard's, columns [old_col, old_col + old_cols)) into
// `shard`; adds the number loaded to *restored. Checks every row's width
// against the table's optimizer state.
Status RestoreSnapshotSlice(const std::string& snapshot, int64_t row_begin, int64_t row_end, int old_col,
                            int old_cols, EmbeddingShard* shard, int64_t* restored);

}  // namespace tessera
