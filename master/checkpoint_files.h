// Checkpoint directories on disk (issue: storage tiers and checkpoints).
//
//   <root>/ckpt-<step, 12 digits>/
//     ps<k>/shard<id>/    one row snapshot per shard (ps/row_snapshot.h)
//     trainer.params      trainer 0's dense model, dense optimizer state and
//                         data-parallel tables (common/param_file.h)
//     manifest.json       written last, atomically: {step, job, plan, shards:
//                         [{shard_id, path, rows, bytes}], trainer_state};
//                         paths relative to the checkpoint's folder
//
// A checkpoint is complete only when its manifest exists; one without is the
// remains of an interrupted checkpoint and is never loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera {

std::string CheckpointDir(const std::string& root, int64_t step);

// Writes `bytes` to path and flushes them to disk (fsync). Its name in its
// folder is made durable by the folder's fsync: WriteManifest does it.
Status WriteFileDurably(const std::string& path, const std::string& bytes);

// Writes manifest.json into dir, the last step of a checkpoint: first makes
// the names already in dir durable (the servers' folders, trainer.params: their
// contents are on disk already), then writes the manifest to a temporary file,
// flushes it, renames it and flushes dir and its parent, so the manifest
// appears whole or not at all, and only over durable data. *bytes (if set):
// the manifest's size.
Status WriteManifest(const std::string& dir, const nlohmann::json& manifest, int64_t* bytes = nullptr);

// The folders of the complete checkpoints under root (those with a
// manifest), newest first.
std::vector<std::string> CompleteCheckpoints(const std::string& root);

// The manifest of the checkpoint in dir; DATA_LOSS, naming it, when it is
// not a JSON object with a step (truncated, damaged).
StatusOr<nlohmann::json> ReadManifest(const std::string& dir);

// Where a shard's snapshot named `path` in the manifest of the checkpoint in
// `dir` is: paths are relative to the checkpoint's folder, so a checkpoint
// moved or copied elsewhere loads; an absolute path (older manifests) is
// taken as it is when it exists, else its part below its ckpt-<step> folder
// is looked for in `dir`.
std::string ResolveShardPath(const std::string& dir, const std::string& path);

// Deletes all but the `keep` newest complete checkpoints, and incomplete
// ones older than the newest complete one.
Status PruneCheckpoints(const std::string& root, int keep);

}  // namespace tessera
