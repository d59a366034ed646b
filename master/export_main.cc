// tessera_export: writes a checkpoint's tables and dense model as
// safetensors or .npy files plus model.json (docs/operations.md, "Exporting
// a trained model"). Exit code 0 when the export is whole, 1 otherwise.
#include <iostream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/flag_help.h"
#include "master/checkpoint_export.h"

DEFINE_string(checkpoint, "", "A checkpoint folder (ckpt-<step>), or a job's checkpoint.dir: its newest usable one");
DEFINE_string(format, "safetensors", "safetensors or npy");
DEFINE_string(out, "", "Folder to write (absent or empty; see --overwrite)");
DEFINE_bool(overwrite, false, "Replace an earlier export in --out");
DEFINE_bool(no_optimizer_state, false, "Leave the optimizer state out");
DEFINE_bool(materialized_only, false, "Per table only the rows a server stored, with an ids tensor");
DEFINE_int64(memory_mb, 256, "Rows of a table assembled in memory at once (MiB)");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("tessera_export --checkpoint DIR --format safetensors|npy --out OUT");
  tessera::ShowOwnFlagsIfAsked(argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  tessera::ExportOptions options;
  options.checkpoint = FLAGS_checkpoint;
  options.out = FLAGS_out;
  options.overwrite = FLAGS_overwrite;
  options.optimizer_state = !FLAGS_no_optimizer_state;
  options.materialized_only = FLAGS_materialized_only;
  options.window_bytes = FLAGS_memory_mb << 20;
  tessera::Status st = tessera::ParseTensorFormat(FLAGS_format, &options.format);
  if (st.ok() && (options.checkpoint.empty() || options.out.empty())) {
    st = tessera::Status::InvalidArgument("--checkpoint and --out are required");
  }
  if (st.ok() && FLAGS_memory_mb < 1) st = tessera::Status::InvalidArgument("--memory_mb must be at least 1");
  if (!st.ok()) {
    std::cerr << "tessera_export: " << st << std::endl;
    return 1;
  }
  auto result = tessera::ExportCheckpoint(options);
  if (!result.ok()) {
    std::cerr << "tessera_export: " << result.status() << std::endl;
    return 1;
  }
  for (const std::string& p : result->passed_over) std::cout << "[export] passed over damaged " << p << "\n";
  std::cout << "[export] checkpoint " << result->checkpoint_dir << " (step " << result->step << "): "
            << result->tensors << " tensors, " << result->bytes << " bytes of data in " << options.out << std::endl;
  return 0;
}
