// One embedding table of a checkpoint, assembled from its shards into whole
// tensors, window by window (tessera_export, docs/operations.md).
//
// A table's tensors (R = num_embeddings, or the materialized rows with
// --materialized_only; C = the table's column ranges):
//   tables.<t>.weight      F32 [R, dim]
//   tables.<t>.ids         I64 [R]   materialized_only: row i's id, ascending
//   tables.<t>.<state>     optimizer state (ps/row_layout.h), torch's names:
//     adagrad          sum [R, dim]
//     rowwise_adagrad  sum [R] (one per row, [R, C] when column-wise: each
//                      column shard keeps its own)
//     adam             exp_avg [R, dim], exp_avg_sq [R, dim], step [R] ([R, C])
// A row no shard stored holds what the server would initialise it to
// (kernels/row_init.h InitRow per column shard, InitSparseOptimizerState).
//
// Memory: one window of rows of every tensor (ExportOptions::window_bytes),
// plus with materialized_only the ids of one row range (8 bytes a row). A
// window scans each of its shards' snapshots once: a table larger than a
// window reads a rows.bin snapshot once per window (RocksDB ones seek).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/param_file.h"
#include "common/status.h"
#include "master/tensor_file.h"
#include "ps/row_layout.h"
#include "ps/row_snapshot.h"

namespace tessera {

// Rows [row_offset, row_offset + num_rows) x columns [col_offset, + num_cols)
// of a table, each stored as [num_cols weights | optimizer state].
struct RowSource {
  int64_t row_offset = 0;
  int64_t num_rows = 0;
  int col_offset = 0;
  int num_cols = 0;
  std::string snapshot;               // a shard's snapshot folder (ps/row_snapshot.h), or
  const ParamArray* rows = nullptr;   // every row in memory ([num_rows x width]: data-parallel)
  std::string what;                   // for messages: "shard 3"
};

class TableExport {
 public:
  // Checks that the sources tile the table: row ranges from 0 to
  // num_embeddings, each cut into the same column ranges covering dim.
  // DATA_LOSS otherwise (a plan this reader cannot assemble).
  static StatusOr<TableExport> Create(const TableConfig& table, std::vector<RowSource> sources,
                                      bool materialized_only, bool optimizer_state);

  // Rows to write: num_embeddings, or with materialized_only the rows some
  // shard stored (scans their ids once).
  Status CountRows();
  int64_t rows() const { return rows_; }

  // The tensors, for the model file and the optimizer file (see above).
  std::vector<TensorSpec> ModelTensors() const;
  std::vector<TensorSpec> OptimizerTensors() const;

  // Writes them: ModelTensors() at model_index.. of `model`, OptimizerTensors()
  // at optimizer_index.. of `optimizer` (null without optimizer state).
  // REQUIRES: CountRows() succeeded.
  Status Write(TensorWriter* model, size_t model_index, TensorWriter* optimizer, size_t optimizer_index,
               int64_t window_bytes);

  // For model.json: the column ranges and the state tensors' names.
  nlohmann::json Describe() const;

 private:
  struct Group {  // one row range and its column shards, by column
    int64_t row_offset = 0, num_rows = 0;
    std::vector<const RowSource*> sources;
  };
  class Window;

  TableExport() = default;
  // The ids some source of `g` stored, ascending, each once.
  StatusOr<std::vector<int64_t>> StoredIds(const Group& g) const;

  TableConfig table_;
  RowLayout layout_;
  bool materialized_only_ = false;
  bool optimizer_state_ = true;
  std::vector<RowSource> sources_;
  std::vector<Group> groups_;
  std::vector<std::pair<int, int>> columns_;  // (offset, count) of each column range
  std::vector<std::string> block_names_, row_state_names_;
  int64_t rows_ = 0;
};

// Calls fn for the rows of `source` with id in [begin, end), as ScanSnapshot
// does, checking each row is `width` floats wide (else DATA_LOSS).
Status ScanRowSource(const RowSource& source, int64_t begin, int64_t end, int width, const SnapshotRowsFn& fn);

}  // namespace tessera
