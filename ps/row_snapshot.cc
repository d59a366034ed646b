#include "ps/row_snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "ps/rocks_row_store.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little, "rows.bin is little-endian, as the wire format");

constexpr char kMetaFile[] = "meta.json";
constexpr char kRowsFile[] = "rows.bin";
constexpr char kRowsMagic[8] = {'T', 'S', 'R', 'O', 'W', 'S', '0', '1'};

struct RowsHeader {
  char magic[8];
  uint32_t row_width;
  uint32_t reserved;
  int64_t num_rows;
  uint64_t checksum;
};
static_assert(sizeof(RowsHeader) == 32);

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return ErrnoStatus("cannot write " + path);
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

// Writes `text` to dir/name durably: a temporary file, fsync, rename, fsync of the directory.
Status WriteFileAtomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/" + name + ".tmp", path = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create " + tmp);
  Status st = WriteAll(fd, text.data(), text.size(), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("cannot sync " + tmp);
  if (::close(fd) != 0 && st.ok()) st = ErrnoStatus("cannot close " + tmp);
  TESSERA_RETURN_IF_ERROR(st);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("cannot rename " + tmp + " to " + path);
  return SyncDirectory(dir);
}

// Closes a descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes a file sequentially through an aligned staging buffer, with
// O_DIRECT where the file system takes it: the bytes go from the buffer to
// the device, not through the page cache (filling the page cache cost 5x the
// write itself on the dev machine: bench/README.md, "Checkpoint cost"). Where
// O_DIRECT is refused (tmpfs, some network file systems) it writes buffered.
class SequentialFile {
 public:
  static constexpr size_t kAlign = 4096;        // O_DIRECT: offsets, sizes and memory
  static constexpr size_t kCapacity = 4 << 20;  // a multiple of kAlign

  SequentialFile() : buffer_(static_cast<char*>(std::aligned_alloc(kAlign, kCapacity)), &std::free) {}
  SequentialFile(const SequentialFile&) = delete;
  SequentialFile& operator=(const SequentialFile&) = delete;

  // Creates path (it must not exist) and leaves `reserve` zero bytes at its
  // start, to be filled by Finish.
  Status Create(const std::string& path, size_t reserve) {
    if (!buffer_) return Status::ResourceExhausted("cannot allocate a write buffer for " + path);
    path_ = path;
    f_.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (f_.fd < 0 && errno == EINVAL) f_.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f_.fd < 0) return ErrnoStatus("cannot create " + path);
    direct_ = (::fcntl(f_.fd, F_GETFL) & O_DIRECT) != 0;
    std::memset(buffer_.get(), 0, reserve);
    used_ = reserve;
    return Status::OK();
  }

  Status Append(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const size_t take = std::min(n, kCapacity - used_);
      std::memcpy(buffer_.get() + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == kCapacity) TESSERA_RETURN_IF_ERROR(Drain(kCapacity));
    }
    return Status::OK();
  }

  // Writes what is left, then `head` over the reserved start, and syncs the
  // file (its data and size) to disk. *write_s and *sync_s get the times.
  Status Finish(const void* head, size_t head_bytes, double* write_s, double* sync_s) {
    const auto start = Clock::now();
    const uint64_t size = written_ + used_;
    if (written_ == 0) std::memcpy(buffer_.get(), head, head_bytes);  // the start is still here
    const size_t tail = used_;
    // O_DIRECT writes whole blocks: pad, then cut the file back to size.
    const size_t padded = direct_ ? (tail + kAlign - 1) / kAlign * kAlign : tail;
    std::memset(buffer_.get() + tail, 0, padded - tail);
    const bool head_written = written_ == 0;
    TESSERA_RETURN_IF_ERROR(Drain(padded));
    if (padded != tail && ::ftruncate(f_.fd, static_cast<off_t>(size)) != 0) return ErrnoStatus("cannot truncate " + path_);
    if (!head_written) {
      // The first block, kept when it was written, with the head in it.
      std::memcpy(first_block_, head, head_bytes);
      TESSERA_RETURN_IF_ERROR(PwriteFirstBlock());
    }
    *write_s += Since(start);
    const auto sync_start = Clock::now();
    // fdatasync: the file is new, so its size (needed to read it) is synced too.
    if (::fdatasync(f_.fd) != 0) return ErrnoStatus("cannot sync " + path_);
    const int fd = std::exchange(f_.fd, -1);
    if (::close(fd) != 0) return ErrnoStatus("cannot close " + path_);
    *sync_s += Since(sync_start);
    return Status::OK();
  }

  uint64_t size() const { return written_ + used_; }

 private:
  Status Drain(size_t n) {
    if (written_ == 0) std::memcpy(first_block_, buffer_.get(), std::min(n, kAlign));
    size_t done = 0;
    while (done < n) {
      const ssize_t k = ::write(f_.fd, buffer_.get() + done, n - done);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && errno == EINVAL && direct_) {
        // Opened with O_DIRECT, refused at the first write: go buffered.
        if (::fcntl(f_.fd, F_SETFL, ::fcntl(f_.fd, F_GETFL) & ~O_DIRECT) != 0) return ErrnoStatus("cannot write " + path_);
        direct_ = false;
        continue;
      }
      if (k < 0) return ErrnoStatus("cannot write " + path_);
      done += static_cast<size_t>(k);
    }
    written_ += n;
    used_ = 0;
    return Status::OK();
  }

  Status PwriteFirstBlock() {
    // A whole block for O_DIRECT; the file holds at least one (written_ >= kCapacity).
    char* block = buffer_.get();
    std::memcpy(block, first_block_, kAlign);
    for (size_t done = 0; done < kAlign;) {
      const ssize_t k = ::pwrite(f_.fd, block + done, kAlign - done, static_cast<off_t>(done));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return ErrnoStatus("cannot write " + path_);
      done += static_cast<size_t>(k);
    }
    return Status::OK();
  }

  std::unique_ptr<char, decltype(&std::free)> buffer_;
  Fd f_;
  std::string path_;
  bool direct_ = false;
  size_t used_ = 0;
  uint64_t written_ = 0;
  char first_block_[kAlign];
};

// Copies the rows of a store that is not backed by RocksDB into dir/rows.bin
// (see row_snapshot.h) and makes it durable: one sequential write, then one
// fdatasync. The ids are kept aside and appended; the header, which needs
// their count and the checksum, goes in last.
Status CopyRows(RowStore& store, const std::string& dir, SnapshotStats* stats) {
  const std::string path = dir + "/" + kRowsFile;
  const auto start = Clock::now();
  SequentialFile file;
  TESSERA_RETURN_IF_ERROR(file.Create(path, sizeof(RowsHeader)));
  const int w = store.row_width();
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(w);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(std::max<int64_t>(0, store.size())));
  Checksum64 sum;
  TESSERA_RETURN_IF_ERROR(store.ForEach([&](int64_t id, const float* row) -> Status {
    sum.Update(row, row_bytes);
    ids.push_back(id);
    return file.Append(row, row_bytes);
  }));
  // Pad the rows to 8 bytes, so the ids are aligned in a mapped file.
  const char zeros[8] = {};
  const size_t pad = (8 - ids.size() * row_bytes % 8) % 8;
  sum.Update(zeros, pad);
  TESSERA_RETURN_IF_ERROR(file.Append(zeros, pad));
  const size_t id_bytes = ids.size() * sizeof(int64_t);
  sum.Update(ids.data(), id_bytes);
  TESSERA_RETURN_IF_ERROR(file.Append(ids.data(), id_bytes));
  RowsHeader h{};
  std::memcpy(h.magic, kRowsMagic, sizeof(h.magic));
  h.row_width = static_cast<uint32_t>(w);
  h.num_rows = static_cast<int64_t>(ids.size());
  h.checksum = sum.Final();
  const uint64_t size = file.size();
  stats->write_s += Since(start);
  TESSERA_RETURN_IF_ERROR(file.Finish(&h, sizeof(h), &stats->write_s, &stats->sync_s));
  stats->rows = static_cast<int64_t>(ids.size());
  stats->bytes += static_cast<int64_t>(size);
  return Status::OK();
}

// A read-only mapping of a whole file.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  Status Open(const std::string& path) {
    Fd f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) return ErrnoStatus("cannot open " + path);
    struct stat st;
    if (::fstat(f.fd, &st) != 0) return ErrnoStatus("cannot stat " + path);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return Status::OK();
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED) return ErrnoStatus("cannot map " + path);
    data_ = p;
    // Readers go through the whole file (its checksum first): have the
    // kernel read it ahead in large pieces rather than fault it in page by
    // page. A hint: fine if refused.
    ::madvise(data_, size_, MADV_WILLNEED);
    return Status::OK();
  }
  const char* data() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

Status ScanRowsFile(const std::string& path, int64_t row_begin, int64_t row_end, const SnapshotRowsFn& fn,
                    const std::function<void(int64_t rows)>& expect) {
  MappedFile file;
  TESSERA_RETURN_IF_ERROR(file.Open(path));
  auto damaged = [&](const std::string& why) { return Status::DataLoss("snapshot file " + path + ": " + why); };
  if (file.size() < sizeof(RowsHeader)) return damaged("shorter than its header");
  RowsHeader h;
  std::memcpy(&h, file.data(), sizeof(h));
  if (std::memcmp(h.magic, kRowsMagic, sizeof(h.magic)) != 0) return damaged("not a rows file (bad magic)");
  if (h.row_width == 0 || h.row_width > (1u << 20) || h.num_rows < 0) return damaged("malformed header");
  const uint64_t n = static_cast<uint64_t>(h.num_rows);
  const uint64_t row_bytes = sizeof(float) * uint64_t{h.row_width};
  const uint64_t body = file.size() - sizeof(RowsHeader);
  if (n > body / (row_bytes + sizeof(int64_t))) return damaged("cut short");
  const uint64_t rows_bytes = (n * row_bytes + 7) / 8 * 8;
  if (rows_bytes + n * sizeof(int64_t) != body) return damaged("cut short or too long for its row count");
  Checksum64 sum;
  sum.Update(file.data() + sizeof(RowsHeader), body);
  if (sum.Final() != h.checksum) return damaged("checksum mismatch");
  const char* rows = file.data() + sizeof(RowsHeader);
  const auto* ids = reinterpret_cast<const int64_t*>(rows + rows_bytes);  // 8-aligned: see the padding
  auto in_range = [&](uint64_t i) { return ids[i] >= row_begin && ids[i] < row_end; };
  if (expect) {
    int64_t count = 0;
    for (uint64_t i = 0; i < n; ++i) count += in_range(i) ? 1 : 0;
    expect(count);
  }
  // Runs of consecutive rows in range go to fn where they lie in the file:
  // no sort and no copy (a restore was bound by both).
  for (uint64_t i = 0; i < n;) {
    if (!in_range(i)) {
      ++i;
      continue;
    }
    uint64_t end = i + 1;
    while (end < n && end - i < static_cast<uint64_t>(kSnapshotRunRows) && in_range(end)) ++end;
    TESSERA_RETURN_IF_ERROR(fn(std::span<const int64_t>(ids + i, end - i),
                               reinterpret_cast<const float*>(rows + i * row_bytes), static_cast<int>(h.row_width)));
    i = end;
  }
  return Status::OK();
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

Status SyncDirectory(const std::string& dir) {
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd < 0) return ErrnoStatus("cannot open " + dir);
  if (::fsync(d.fd) != 0) return ErrnoStatus("cannot sync " + dir);
  return Status::OK();
}

Status WriteSnapshot(RowStore& store, const std::string& dir, const nlohmann::json& meta, SnapshotStats* stats) {
  SnapshotStats local;
  SnapshotStats* s = stats != nullptr ? stats : &local;
  *s = SnapshotStats{};
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) return Status::AlreadyExists("snapshot " + dir + " exists already");
  if (auto* rocks = dynamic_cast<RocksCheckpointable*>(&store)) {
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(rocks->CheckpointTo(dir));
    s->write_s = Since(start);
    s->rows = store.size();
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec)) s->bytes += static_cast<int64_t>(e.file_size(ec));
    }
  } else {
    if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoStatus("cannot create " + dir);
    TESSERA_RETURN_IF_ERROR(CopyRows(store, dir, s));
    // rows.bin's name must be on disk before meta.json can be.
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(SyncDirectory(dir));
    s->sync_s += Since(start);
  }
  const auto start = Clock::now();
  const std::string text = meta.dump(2) + "\n";
  TESSERA_RETURN_IF_ERROR(WriteFileAtomically(dir, kMetaFile, text));
  s->sync_s += Since(start);
  s->bytes += static_cast<int64_t>(text.size());
  return Status::OK();
}

Status ScanSnapshot(const std::string& dir, int64_t row_begin, int64_t row_end, const SnapshotRowsFn& fn,
                    const std::function<void(int64_t rows)>& expect) {
  TESSERA_RETURN_IF_ERROR(CheckComplete(dir));
  std::error_code ec;
  if (std::filesystem::exists(dir + "/" + kRowsFile, ec)) {
    return ScanRowsFile(dir + "/" + kRowsFile, row_begin, row_end, fn, expect);
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::OpenReadOnly(dir));
  int first_width = -1;
  std::vector<int64_t> ids;
  std::vector<float> rows;
  auto flush = [&]() -> Status {
    if (ids.empty()) return Status::OK();
    Status st = fn(ids, rows.data(), first_width);
    ids.clear();
    rows.clear();
    return st;
  };
  TESSERA_RETURN_IF_ERROR(db->Scan(row_begin, row_end, [&](int64_t id, const float* row, int width) {
    if (first_width < 0) first_width = width;
    if (width != first_width) {
      return Status::DataLoss("snapshot " + dir + ": row " + std::to_string(id) + " has " + std::to_string(width) +
                              " floats, earlier rows " + std::to_string(first_width));
    }
    ids.push_back(id);
    rows.insert(rows.end(), row, row + width);
    return static_cast<int64_t>(ids.size()) >= kSnapshotRunRows ? flush() : Status::OK();
  }));
  return flush();
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
