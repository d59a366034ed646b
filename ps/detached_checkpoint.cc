#include "ps/detached_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "ps/row_snapshot.h"

namespace tessera {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Copies `from` to the new file `to` and syncs it.
Status CopyDurably(const std::string& from, const std::string& to, int64_t* bytes) {
  Fd in, out;
  in.fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return ErrnoStatus("cannot open " + from);
  out.fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out.fd < 0) return ErrnoStatus("cannot create " + to);
  std::vector<char> buf(size_t{4} << 20);
  for (;;) {
    const ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot read " + from);
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t k = ::write(out.fd, buf.data() + done, static_cast<size_t>(n - done));
      if (k < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("cannot write " + to);
      }
      done += k;
    }
    *bytes += n;
  }
  // fdatasync: the file is new, so its size is synced too.
  if (::fdatasync(out.fd) != 0) return ErrnoStatus("cannot sync " + to);
  return Status::OK();
}

}  // namespace

Status DetachFromLive(const std::string& live, const std::string& checkpoint, const std::string& previous,
                      const std::function<Status(int64_t bytes)>& room, DetachStats* stats) {
  *stats = DetachStats{};
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(checkpoint, ec)) names.push_back(e.path().filename());
  if (ec) return Status::Unavailable("cannot list " + checkpoint + ": " + ec.message());
  // What each file that is the live database's own (the same inode) becomes:
  // a link to the previous checkpoint's copy of it, or a copy.
  struct Detach {
    std::string name;
    std::string link_to;  // empty: copy
  };
  std::vector<Detach> todo;
  int64_t copy_bytes = 0;
  for (const std::string& name : names) {
    const std::string path = checkpoint + "/" + name;
    struct stat own, theirs;
    if (::lstat(path.c_str(), &own) != 0) return ErrnoStatus("cannot stat " + path);
    if (!S_ISREG(own.st_mode) || own.st_nlink == 1) continue;
    if (::stat((live + "/" + name).c_str(), &theirs) != 0 || !SameFile(own, theirs)) continue;
    Detach d{name, ""};
    if (!previous.empty() && name.ends_with(".sst")) {
      const std::string before = previous + "/" + name;
      struct stat copy;
      if (::stat(before.c_str(), &copy) == 0 && S_ISREG(copy.st_mode) && !SameFile(copy, theirs) &&
          copy.st_size == own.st_size) {
        d.link_to = before;
      }
    }
    if (d.link_to.empty()) copy_bytes += own.st_size;
    todo.push_back(std::move(d));
  }
  if (todo.empty()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(room(copy_bytes));
  for (const Detach& d : todo) {
    const std::string path = checkpoint + "/" + d.name;
    const std::string tmp = path + ".detaching";
    ::unlink(tmp.c_str());  // left by a failed attempt
    if (!d.link_to.empty() && ::link(d.link_to.c_str(), tmp.c_str()) == 0) {
      ++stats->files_linked;
    } else {
      // Also when the previous checkpoint went away since (a failed one is
      // removed by the master).
      const Status copied = CopyDurably(path, tmp, &stats->bytes_copied);
      if (!copied.ok()) {
        ::unlink(tmp.c_str());
        return copied;
      }
      ++stats->files_copied;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const Status st = ErrnoStatus("cannot rename " + tmp);
      ::unlink(tmp.c_str());
      return st;
    }
  }
  return SyncDirectory(checkpoint);
}

}  // namespace tessera
