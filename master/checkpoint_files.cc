#include "master/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "master/checkpoint_manifest.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// (step, folder) of every ckpt-* folder under root, oldest first.
std::vector<std::pair<int64_t, fs::path>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("ckpt-", 0) != 0) continue;
    try {
      out.emplace_back(std::stoll(name.substr(5)), e.path());
    } catch (...) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status SyncPath(const std::string& path, bool directory) {
  const int fd = open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return ErrnoStatus("cannot open " + path + " to flush it");
  const Status st = fsync(fd) == 0 ? Status::OK() : ErrnoStatus("cannot flush " + path + " to disk");
  close(fd);
  return st;
}

}  // namespace

std::string CheckpointDir(const std::string& root, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%012lld", static_cast<long long>(step));
  return (fs::path(root) / name).string();
}

Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create " + path);
  const char* p = bytes.data();
  size_t left = bytes.size();
  Status st;
  while (left > 0 && st.ok()) {
    const ssize_t k = write(fd, p, left);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      st = ErrnoStatus("cannot write " + path);
    } else {
      p += k;
      left -= static_cast<size_t>(k);
    }
  }
  if (st.ok() && fsync(fd) != 0) st = ErrnoStatus("cannot flush " + path + " to disk");
  if (close(fd) != 0 && st.ok()) st = ErrnoStatus("cannot close " + path);
  return st;
}

Status WriteManifest(const std::string& dir, const nlohmann::json& manifest, int64_t* bytes) {
  TESSERA_RETURN_IF_ERROR(SyncPath(dir, true));
  const std::string path = dir + "/manifest.json", tmp = path + ".tmp";
  const std::string text = manifest.dump(2) + "\n";
  TESSERA_RETURN_IF_ERROR(WriteFileDurably(tmp, text));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::Unavailable("cannot rename " + tmp + ": " + ec.message());
  TESSERA_RETURN_IF_ERROR(SyncPath(dir, true));
  // The checkpoint's own folder, new in the root.
  const fs::path parent = fs::path(dir).parent_path();
  TESSERA_RETURN_IF_ERROR(SyncPath(parent.empty() ? "." : parent.string(), true));
  if (bytes != nullptr) *bytes = static_cast<int64_t>(text.size());
  return Status::OK();
}

std::vector<std::string> CompleteCheckpoints(const std::string& root) {
  std::vector<std::string> out;
  auto all = ListCheckpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // Without a manifest: an interrupted checkpoint, never loaded.
    if (fs::exists(it->second / "manifest.json")) out.push_back(it->second.string());
  }
  return out;
}

StatusOr<nlohmann::json> ReadManifest(const std::string& dir) {
  std::ifstream in(dir + "/manifest.json");
  if (!in) return Status::DataLoss("checkpoint " + dir + ": cannot read its manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  auto manifest = ParseManifest(text.str());
  if (!manifest.ok()) return manifest.status().WithContext("checkpoint " + dir);
  return manifest;
}

std::string ResolveShardPath(const std::string& dir, const std::string& path) {
  const fs::path p(path);
  if (p.is_relative()) return (fs::path(dir) / p).string();
  if (fs::exists(p)) return path;
  // An older manifest's absolute path, of a checkpoint moved since: the
  // part below its ckpt-<step> folder, in this one.
  fs::path below;
  bool found = false;
  for (const fs::path& part : p) {
    if (found) below /= part;
    if (part.string().rfind("ckpt-", 0) == 0) {
      found = true;
      below.clear();
    }
  }
  return found ? (fs::path(dir) / below).string() : path;
}

Status PruneCheckpoints(const std::string& root, int keep) {
  auto all = ListCheckpoints(root);
  int complete_seen = 0;
  bool newer_complete = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const bool complete = fs::exists(it->second / "manifest.json");
    bool remove = false;
    if (complete) {
      remove = ++complete_seen > keep;
      newer_complete = true;
    } else {
      remove = newer_complete;  // an abandoned attempt older than a good one
    }
    if (remove) {
      std::error_code ec;
      fs::remove_all(it->second, ec);
      if (ec) return Status::Unavailable("cannot delete old checkpoint " + it->second.string() + ": " + ec.message());
    }
  }
  return Status::OK();
}

}  // namespace tessera
