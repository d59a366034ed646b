// tessera_export: a checkpoint as files PyTorch and NumPy load
// (docs/operations.md, "Exporting a trained model").
//
// The master side owns it because the master owns checkpoints: their folder
// layout, manifest and checks (checkpoint_files.h, checkpoint_reader.h). It
// reads the servers' snapshots through ps/row_snapshot.h and fills absent
// rows with the kernels' initializers, the only other code it needs.
//
// OUT holds, for --format safetensors:
//   model.safetensors      every table's weight (ids with materialized_only)
//                          and the dense model's parameters
//   optimizer.safetensors  their optimizer state (unless optimizer_state is off)
// and for npy one <tensor name>.npy per tensor; and in both cases
//   model.json             names, shapes, dtypes and files of the tensors,
//                          the tables (features, hashing, initializer,
//                          optimizer, column ranges) and the dense layers.
// Tensor names: table_export.h for tables; dense: bottom.<i>.weight [out, in],
// bottom.<i>.bias [out], top.<i>.* likewise (what nn.ModuleList attributes
// `bottom` and `top` of nn.Linear hold), and with optimizer state
// <param>.sum (adagrad) or <param>.exp_avg, <param>.exp_avg_sq and
// dense.step (I64 scalar, adam).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "master/tensor_file.h"

namespace tessera {

struct ExportOptions {
  // A checkpoint folder (ckpt-<step>/), or a job's checkpoint root: then its
  // newest checkpoint that passes its checks, as the master resumes.
  std::string checkpoint;
  // The folder to write; created. Must be absent or empty unless overwrite.
  std::string out;
  bool overwrite = false;
  TensorFormat format = TensorFormat::kSafetensors;
  // Also the tables' and the dense model's optimizer state.
  bool optimizer_state = true;
  // Per table only the rows some server stored, with their ids; otherwise
  // every row, those never stored at their initial value.
  bool materialized_only = false;
  // Rows of one table held in memory at once (all its tensors' parts).
  // Larger: fewer passes over a rows.bin snapshot for a big table.
  int64_t window_bytes = int64_t{256} << 20;
};

struct ExportResult {
  std::string checkpoint_dir;            // the checkpoint exported
  int64_t step = 0;
  std::vector<std::string> passed_over;  // damaged newer checkpoints, with why
  int64_t tensors = 0;
  int64_t bytes = 0;                     // of tensor data
};

// Writes the export. Errors (a missing or damaged checkpoint, an OUT that is
// not empty, a disk that fills) are returned; OUT may then hold a partial
// export, without model.json (written last).
StatusOr<ExportResult> ExportCheckpoint(const ExportOptions& options);

}  // namespace tessera
