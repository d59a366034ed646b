// Rows in RocksDB (DESIGN.md §6): the disk tier of a shard's store.
//
// On disk, one RocksDB key per materialized row (the default column family):
//   Key   := row_id:fixed64 big-endian      (so the rows [a, b) are one range scan)
//   Value := row:float32[row_width] little-endian  (embedding columns, then optimizer state)
// Row ids are non-negative. Snapshots (row_snapshot.h) use the same encoding.
//
// RowDb is the database of rows (open, batch get/put, scan, checkpoint), used
// by the RocksDB store, the tiered store's disk tier and snapshots.
// OpenRocksRowStore is the RowStore that keeps every row in RocksDB.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "ps/row_store.h"
#include "ps/row_store_stats.h"

namespace rocksdb {
class Cache;
class DB;
class Env;
class Status;
struct Options;
}  // namespace rocksdb

namespace tessera {

// The one conversion of RocksDB errors: "<context>: <rocksdb message>", with a
// code for the kind of failure (out of space -> kResourceExhausted, I/O ->
// kUnavailable, corruption -> kDataLoss, ...). `context` names the path.
Status FromRocks(const rocksdb::Status& s, std::string_view context);

constexpr size_t kRowKeyBytes = 8;
void EncodeRowKey(int64_t id, char* key);  // REQUIRES: id >= 0; key holds kRowKeyBytes
int64_t DecodeRowKey(const char* key);
void EncodeRowValue(const float* row, int width, char* value);  // value holds 4 * width bytes
void DecodeRowValue(const char* value, int width, float* row);

// What to do with what is (or is not) at RowDbOptions::path.
enum class RowDbOpenMode {
  kOpenOrCreate,  // keep the rows of an existing database, else start empty
  kOpenExisting,  // an error if there is no database
  kCreate,        // an error if there is one already
  kOverwrite,     // destroy an existing database first
};

struct RowDbOptions {
  // Directory of the database; created if missing (its parent must exist).
  std::string path;
  RowDbOpenMode mode = RowDbOpenMode::kOpenOrCreate;
  // RocksDB's block cache. SSTs are read through mmap (the OS page cache holds
  // their data blocks), so this mostly serves index and filter blocks.
  size_t block_cache_bytes = 64 << 20;
  // Memtable size: writes are buffered this much before an SST is written.
  // Smaller: more L0 files to look through per lookup (slower in tier_bench).
  size_t write_buffer_bytes = 64 << 20;
  // The write-ahead log makes each write durable at once. Off: writes since
  // the last Flush() are lost in a crash, which is fine when checkpoints, not
  // the live database, are what a restarted server restores from — and it
  // halves the bytes written.
  bool write_ahead_log = false;
  // Writes come in large batches, each in id order (the tiered store's
  // write-back buffer, ps/write_back_buffer.h): a skip-list memtable, which
  // such a batch fills front to back and which flushes without a sort.
  // Otherwise a hash memtable, for writes of a few rows anywhere.
  bool sorted_writes = false;
  // Writes, flushes and checkpoints are refused (ResourceExhausted) while the
  // disk has less than this much room beyond what the memtables will need
  // when flushed: RocksDB 7.8 as Debian builds it aborts the process (an
  // assert in WritableFileWriter) on some writes that fail for lack of
  // space, so the store stops short of that. 0: RocksDB meets the full
  // disk itself (tests of its error paths).
  size_t reserved_disk_bytes = 64 << 20;
  // File system hook for tests (fault injection); nullptr: the default Env.
  // Not owned; must outlive the database.
  rocksdb::Env* env = nullptr;
  // Deletes the database when it closes: for a staged copy no one reopens.
  bool destroy_on_close = false;
  // Checkpoints on the database's own file system hard-link its SSTs, as
  // RocksDB makes them: fast, but a damaged block of the disk then damages
  // the live rows and those checkpoints at once. Off (the default): every
  // checkpoint owns its bytes (ps/detached_checkpoint.h).
  bool checkpoint_hard_links = false;
};

// A RocksDB database of rows of one width. Thread-safe (RocksDB is, and a
// recovery after a write error holds the database alone): any
// method may run concurrently with any other. A row is read or written whole.
class RowDb {
 public:
  // REQUIRES: row_width > 0.
  static StatusOr<std::unique_ptr<RowDb>> Open(const RowDbOptions& options, int row_width);
  // Opens an existing database read-only; rows may have any width (Scan
  // reports each row's). Only Scan and CountRows work; the rest fail.
  static StatusOr<std::unique_ptr<RowDb>> OpenReadOnly(const std::string& path, rocksdb::Env* env = nullptr);
  ~RowDb();

  const std::string& path() const { return path_; }

  // For each i: if row ids[i] is stored, copies it to rows + i * row_width and
  // sets found[i] = 1, else found[i] = 0 and leaves that row alone.
  Status Get(std::span<const int64_t> ids, float* rows, uint8_t* found);
  // Writes rows[i] as row ids[i], all or nothing (one WriteBatch).
  Status Put(std::span<const int64_t> ids, const float* const* rows);
  // Calls fn for each stored row with id in [begin, end), in id order, until
  // fn returns an error (returned). `width` is the row's (stored) width.
  Status Scan(int64_t begin, int64_t end,
              const std::function<Status(int64_t id, const float* row, int width)>& fn);
  // Rows stored (counted by a scan: call once, at open).
  StatusOr<int64_t> CountRows();
  // Writes the memtable to an SST, so the rows written so far are on disk.
  Status Flush();
  // A copy of the database at `dir` (which must not exist), consistent as of
  // the call, that shares no file with the live database (unless
  // checkpoint_hard_links): SSTs that the last checkpoint made here already
  // copied are hard links to those copies.
  Status Checkpoint(const std::string& dir);

  // Adds this database's traffic to stats->rocksdb_*.
  void AddTraffic(RowStoreStats* stats) const;

 private:
  RowDb(std::string path, int row_width);
  // After a failed write: reopens the database, so that writes work again
  // once the disk has room (see the .cc for why not DB::Resume).
  Status Recover();
  Status ReopenLocked();
  // OK when the disk has room for the memtables and reserved_disk_bytes_,
  // or when the file system cannot say; else ResourceExhausted for `what`.
  Status CheckRoom(const std::string& what, uint64_t reserve) const;

  const std::string path_;
  const int row_width_;  // 0 when opened read-only: any width
  bool write_ahead_log_ = false;
  bool destroy_on_close_ = false;
  bool checkpoint_hard_links_ = false;
  uint64_t reserved_disk_bytes_ = 0;
  // The last checkpoint made by Checkpoint, whose copies the next one links.
  std::mutex checkpoint_mu_;
  std::string last_checkpoint_;  // GUARDED_BY(checkpoint_mu_)
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::Options> options_;  // as opened; a recovery reopens with them
  // Shared by every use of db_, exclusive while a recovery closes and reopens it.
  mutable std::shared_mutex mu_;
  std::unique_ptr<rocksdb::DB> db_;  // null only after a failed reopen
  // After a failed write RocksDB refuses writes; the next Put or Flush
  // reopens the database first (Recover), so a cleared fault (disk space
  // freed) heals.
  std::atomic<bool> needs_reopen_{false};
  // Rows taken out of the memtables of a database being reopened (encoded
  // key -> value), kept until they are written to the reopened one. They are
  // the newest versions of their rows: Get reads them first.
  std::map<std::string, std::string> carried_;
  std::atomic<int64_t> rows_read_{0}, bytes_read_{0}, rows_written_{0}, bytes_written_{0};
};

// A store whose rows, once flushed, are exactly the rows of one RowDb (the
// RocksDB and tiered stores): WriteSnapshot asks it for a RocksDB checkpoint
// instead of copying its rows one by one.
class RocksCheckpointable {
 public:
  virtual ~RocksCheckpointable() = default;
  // Writes back every dirty row, then checkpoints the database at `dir` (which
  // must not exist), consistently: writers wait.
  virtual Status CheckpointTo(const std::string& dir) = 0;
};

struct RocksRowStoreOptions {
  RowStoreOptions rows;  // REQUIRES: rows.row_width > 0, rows.init set
  RowDbOptions db;
};

// Every row in RocksDB; nothing cached above it but RocksDB's block cache.
// Read of a row never written returns its initial value without storing it.
// Update reads, applies fn and writes the batch back in one WriteBatch; if the
// write fails, Update returns the error and the rows keep their old values.
// Readers never wait for writers (they see each row before or after an
// Update); Updates and Puts run one at a time. Stats() reports one tier,
// "rocksdb"; Flush() flushes the memtable.
StatusOr<std::unique_ptr<RowStore>> OpenRocksRowStore(const RocksRowStoreOptions& options);

}  // namespace tessera
