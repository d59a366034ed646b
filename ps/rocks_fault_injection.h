// Test-only: a RocksDB Env whose files stop accepting writes after a set
// number of bytes, failing them as a full disk does (IOStatus::NoSpace).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace tessera {

class FaultFs {
 public:
  FaultFs() : fs_(std::make_shared<Fs>(rocksdb::FileSystem::Default())), env_(rocksdb::NewCompositeEnv(fs_)) {}

  rocksdb::Env* env() const { return env_.get(); }
  // Bytes every writable file together may still append; past that, NoSpace.
  void SetBytesLeft(int64_t n) { fs_->left.store(n); }
  // What the file system reports free from now on, whatever the allowance
  // is (-1: the allowance): a disk that another process fills or frees
  // between a check of its room and the write.
  void SetReportedFree(int64_t n) { fs_->reported.store(n); }

 private:
  class Fs : public rocksdb::FileSystemWrapper {
   public:
    explicit Fs(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}
    const char* Name() const override { return "TesseraFaultFs"; }
    rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
      std::unique_ptr<rocksdb::FSWritableFile> file;
      rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
      if (s.ok()) *r = std::make_unique<File>(std::move(file), this);
      return s;
    }
    // What is left of the allowance, as a full disk's statvfs would say.
    rocksdb::IOStatus GetFreeSpace(const std::string&, const rocksdb::IOOptions&, uint64_t* free,
                                   rocksdb::IODebugContext*) override {
      const int64_t said = reported.load();
      *free = static_cast<uint64_t>(std::max<int64_t>(0, said >= 0 ? said : left.load()));
      return rocksdb::IOStatus::OK();
    }
    // Takes n bytes of the allowance, or none and false.
    bool Take(size_t n) {
      int64_t have = left.load();
      do {
        if (have < static_cast<int64_t>(n)) return false;
      } while (!left.compare_exchange_weak(have, have - static_cast<int64_t>(n)));
      return true;
    }
    std::atomic<int64_t> left{std::numeric_limits<int64_t>::max()};
    std::atomic<int64_t> reported{-1};
  };

  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, Fs* fs) : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o, rocksdb::IODebugContext* g) override {
      if (!fs_->Take(d.size())) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return target()->Append(d, o, g);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* g) override {
      if (!fs_->Take(d.size())) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return target()->Append(d, o, v, g);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* g) override {
      if (!fs_->Take(d.size())) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return target()->PositionedAppend(d, off, o, g);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off, const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* g) override {
      if (!fs_->Take(d.size())) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return target()->PositionedAppend(d, off, o, v, g);
    }

   private:
    Fs* fs_;
  };

  std::shared_ptr<Fs> fs_;
  std::unique_ptr<rocksdb::Env> env_;
};

}  // namespace tessera
