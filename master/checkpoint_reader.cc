#include "master/checkpoint_reader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/checksum.h"
#include "master/checkpoint_files.h"

namespace tessera {

namespace fs = std::filesystem;

Status CheckShardFiles(const std::string& dir, const CheckedManifest& checked) {
  for (size_t id = 0; id < checked.shards.size(); ++id) {
    const ManifestShard& s = checked.shards[id];
    const std::string path = ResolveShardPath(dir, s.path);
    if (!fs::is_directory(path)) {
      return Status::DataLoss("checkpoint " + dir + ": the snapshot of shard " + std::to_string(id) + " (" + path +
                              ") is missing");
    }
    for (const auto& [name, want] : s.files) {
      const std::string file = path + "/" + name;
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      if (ec) return Status::DataLoss("checkpoint " + dir + ": " + file + " is missing");
      if (static_cast<int64_t>(size) != want) {
        return Status::DataLoss("checkpoint " + dir + ": " + file + " has " + std::to_string(size) +
                                " bytes, the manifest says " + std::to_string(want));
      }
    }
  }
  return Status::OK();
}

StatusOr<std::string> ReadTrainerState(const std::string& dir, const CheckedManifest& checked) {
  std::ifstream in(dir + "/" + checked.trainer_state, std::ios::binary);
  if (!in) return Status::DataLoss("checkpoint " + dir + " has no trainer state (" + checked.trainer_state + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (checked.trainer_state_summed) {
    Checksum64 sum;
    sum.Update(bytes.data(), bytes.size());
    if (static_cast<int64_t>(bytes.size()) != checked.trainer_state_bytes || sum.Final() != checked.trainer_state_checksum) {
      return Status::DataLoss("checkpoint " + dir + ": its trainer state (" + std::to_string(bytes.size()) +
                              " bytes) is not what was written: size or checksum differ from the manifest's");
    }
  }
  return bytes;
}

StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "manifest.json")) {
    return Status::NotFound(dir + " is not a checkpoint folder (no manifest.json)");
  }
  OpenedCheckpoint c;
  c.dir = dir;
  TESSERA_ASSIGN_OR_RETURN(c.manifest, ReadManifest(dir));
  if (!c.manifest.contains("job")) return Status::DataLoss("checkpoint " + dir + ": its manifest has no job");
  auto job = ParseJobConfigJson(c.manifest["job"], "");
  if (!job.ok()) return Status::DataLoss("checkpoint " + dir + ": the job in its manifest: " + job.status().message());
  c.job = std::move(*job);
  auto checked = CheckManifest(c.manifest, c.job);
  if (!checked.ok()) return checked.status().WithContext("checkpoint " + dir);
  c.checked = std::move(*checked);
  TESSERA_RETURN_IF_ERROR(CheckShardFiles(dir, c.checked));
  TESSERA_ASSIGN_OR_RETURN(c.trainer_state, ReadTrainerState(dir, c.checked));
  for (ManifestShard& s : c.checked.shards) s.path = ResolveShardPath(dir, s.path);
  return c;
}

StatusOr<OpenedCheckpoint> OpenNewestCheckpoint(const std::string& path, std::vector<std::string>* passed_over) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return Status::NotFound("no folder " + path);
  if (fs::exists(fs::path(path) / "manifest.json")) return OpenCheckpoint(path);
  const std::vector<std::string> all = CompleteCheckpoints(path);
  if (all.empty()) {
    return Status::NotFound(path + " is neither a checkpoint folder nor a checkpoint root with a complete checkpoint");
  }
  for (const std::string& dir : all) {
    auto c = OpenCheckpoint(dir);
    if (c.ok() || c.status().code() != StatusCode::kDataLoss) return c;
    passed_over->push_back(dir + ": " + c.status().message());
  }
  return Status::DataLoss("no usable checkpoint under " + path + ": the newest: " + passed_over->front());
}

}  // namespace tessera
