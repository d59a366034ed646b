#include "ps/row_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ps/rocks_row_store.h"

namespace tessera {
namespace {

constexpr char kMetaFile[] = "meta.json";

Status Errno(const std::string& what) { return Status::Unavailable(what + ": " + std::strerror(errno)); }

// Writes `text` to dir/name durably: a temporary file, fsync, rename, fsync of the directory.
Status WriteFileAtomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/" + name + ".tmp", path = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t k = ::write(fd, text.data() + done, text.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      Status st = errno == ENOSPC ? Status::ResourceExhausted("disk full writing " + tmp) : Errno("cannot write " + tmp);
      ::close(fd);
      return st;
    }
    done += static_cast<size_t>(k);
  }
  if (::fsync(fd) != 0) {
    Status st = Errno("cannot sync " + tmp);
    ::close(fd);
    return st;
  }
  if (::close(fd) != 0) return Errno("cannot close " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename " + tmp + " to " + path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("cannot open " + dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  return rc == 0 ? Status::OK() : Errno("cannot sync " + dir);
}

// The rows of a store that is not backed by RocksDB, copied into a new database.
Status CopyRows(RowStore& store, const std::string& dir) {
  RowDbOptions o;
  o.path = dir;
  o.mode = RowDbOpenMode::kCreate;
  o.block_cache_bytes = 8 << 20;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::Open(o, store.row_width()));
  constexpr size_t kBatchRows = 4096;
  const int w = store.row_width();
  std::vector<int64_t> ids;
  std::vector<float> rows;
  auto write = [&]() -> Status {
    std::vector<const float*> ptrs(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ptrs[i] = rows.data() + i * w;
    TESSERA_RETURN_IF_ERROR(db->Put(ids, ptrs.data()));
    ids.clear();
    rows.clear();
    return Status::OK();
  };
  TESSERA_RETURN_IF_ERROR(store.ForEach([&](int64_t id, const float* row) {
    ids.push_back(id);
    rows.insert(rows.end(), row, row + w);
    return ids.size() == kBatchRows ? write() : Status::OK();
  }));
  TESSERA_RETURN_IF_ERROR(write());
  return db->Flush();
}

Status CheckComplete(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return Status::NotFound("no snapshot at " + dir);
  if (!std::filesystem::exists(dir + "/" + kMetaFile, ec)) {
    return Status::FailedPrecondition("snapshot " + dir + " is incomplete (no " + kMetaFile + "): not readable");
  }
  return Status::OK();
}

}  // namespace

Status WriteSnapshot(RowStore& store, const std::string& dir, const nlohmann::json& meta) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) return Status::AlreadyExists("snapshot " + dir + " exists already");
  if (auto* rocks = dynamic_cast<RocksCheckpointable*>(&store)) {
    TESSERA_RETURN_IF_ERROR(rocks->CheckpointTo(dir));
  } else {
    TESSERA_RETURN_IF_ERROR(CopyRows(store, dir));
  }
  return WriteFileAtomically(dir, kMetaFile, meta.dump(2) + "\n");
}

Status ScanSnapshot(const std::string& dir, int64_t row_begin, int64_t row_end,
                    const std::function<Status(int64_t id, const float* row, int width)>& fn) {
  TESSERA_RETURN_IF_ERROR(CheckComplete(dir));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::OpenReadOnly(dir));
  int first_width = -1;
  return db->Scan(row_begin, row_end, [&](int64_t id, const float* row, int width) {
    if (first_width < 0) first_width = width;
    if (width != first_width) {
      return Status::DataLoss("snapshot " + dir + ": row " + std::to_string(id) + " has " + std::to_string(width) +
                              " floats, earlier rows " + std::to_string(first_width));
    }
    return fn(id, row, width);
  });
}

StatusOr<nlohmann::json> ReadSnapshotMeta(const std::string& dir) {
  TESSERA_RETURN_IF_ERROR(CheckComplete(dir));
  const std::string path = dir + "/" + kMetaFile;
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::DataLoss(path + " is not valid JSON");
  return j;
}

}  // namespace tessera
