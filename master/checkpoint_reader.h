// Opening one checkpoint folder for reading, with every check a reader owes
// before it trusts a row: the manifest parses and fits its own job, every
// shard's files are there at the sizes the servers wrote, and the trainer
// state is the bytes the master wrote (size and checksum). A damaged
// checkpoint is DATA_LOSS naming the file, never rows quietly missing.
//
// tessera_export reads checkpoints with it; the master's resume
// (Master::ReadRestorePoint) makes the same checks against the job it runs.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/status.h"
#include "master/checkpoint_manifest.h"

namespace tessera {

struct OpenedCheckpoint {
  std::string dir;
  nlohmann::json manifest;
  JobConfig job;            // the job that wrote it (from its manifest)
  CheckedManifest checked;  // shard paths resolved against dir
  std::string trainer_state;  // the trainer state file's bytes
};

// DATA_LOSS naming the first shard whose folder or recorded file is missing
// or has another size than the manifest says. Shard paths as in the manifest.
Status CheckShardFiles(const std::string& dir, const CheckedManifest& checked);

// The trainer state file's bytes, checked against the manifest's size and
// checksum when it recorded them; DATA_LOSS otherwise.
StatusOr<std::string> ReadTrainerState(const std::string& dir, const CheckedManifest& checked);

// Everything above, against the checkpoint's own job. NOT_FOUND when dir has
// no manifest.json.
StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& dir);

// `path` is a checkpoint folder (it has a manifest.json): that one. Else the
// job's checkpoint root: its newest complete checkpoint that opens, the way
// the master resumes; each damaged newer one passed over is added to
// *passed_over with why. NOT_FOUND when there is none.
StatusOr<OpenedCheckpoint> OpenNewestCheckpoint(const std::string& path, std::vector<std::string>* passed_over);

}  // namespace tessera
