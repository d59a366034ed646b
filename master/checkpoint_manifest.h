// manifest.json, the last file of a checkpoint (master/checkpoint_files.h):
//
//   Manifest := {format: 1, step: int, job: JobConfig, plan: ShardingPlan,
//                shards: [Shard], trainer_state: file name,
//                trainer_state_bytes: int, trainer_state_checksum: uint64}
//   Shard    := {shard_id: int, path: string, files: {name: bytes}, ...}
//               path relative to the checkpoint's folder; files: every file
//               of the shard's snapshot and its size; the rest is what the
//               server reported (rows, bytes, table, ...), kept for people
// (files and trainer_state_bytes/_checksum are absent from older manifests:
// those are then not checked.)
//
// Reading one is two pure steps, so a fuzz target can drive both without a
// file: ParseManifest (the text), then CheckManifest (against the job that
// resumes from it); the master then looks for the files it names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "common/status.h"

namespace tessera {

// The manifest of a checkpoint at `step` of `job` under `plan`; `shards` as
// the servers reported them, paths already relative.
nlohmann::json MakeManifest(int64_t step, const nlohmann::json& job, const nlohmann::json& plan,
                            nlohmann::json shards);

// manifest.json's text. DATA_LOSS when it is not a JSON object with an
// integer step (truncated, damaged).
StatusOr<nlohmann::json> ParseManifest(std::string_view text);

// A shard of the checkpoint: where the plan had it and where its rows are.
struct ManifestShard {
  ShardSpec spec;          // in the checkpoint's plan
  std::string table;       // its table's name
  std::string path;        // as written: relative to the checkpoint's folder
  std::vector<std::pair<std::string, int64_t>> files;  // file name in path, bytes
};

struct CheckedManifest {
  int64_t step = 0;
  std::vector<ManifestShard> shards;  // by shard id
  std::string trainer_state;          // file name in the checkpoint's folder
  // Its size and Checksum64, when the manifest recorded them.
  bool trainer_state_summed = false;
  int64_t trainer_state_bytes = 0;
  uint64_t trainer_state_checksum = 0;
};

// Checks a parsed manifest whole before anything is loaded: every field has
// its type, its job and plan parse and the plan fits its job, its tables are
// `job`'s (name, rows, dim, optimizer; else FAILED_PRECONDITION: another
// job's checkpoint), and it lists every shard of its plan exactly once.
// DATA_LOSS for a damaged one (an older checkpoint may serve). Touches no
// file.
StatusOr<CheckedManifest> CheckManifest(const nlohmann::json& manifest, const JobConfig& job);

}  // namespace tessera
