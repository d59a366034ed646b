// RowDb (a RocksDB database of rows) and the RowStore that keeps every row in
// it. The key and value encoding is written down in rocks_row_store.h.
#include "ps/rocks_row_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <glog/logging.h>

#include "ps/detached_checkpoint.h"
#include "ps/rocks_glog_logger.h"

namespace tessera {

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::OK();
  std::string m = std::string(context) + ": " + s.ToString();
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return Status::NotFound(std::move(m));
    case rocksdb::Status::kCorruption:
      return Status::DataLoss(std::move(m));
    case rocksdb::Status::kNotSupported:
      return Status::Unimplemented(std::move(m));
    case rocksdb::Status::kInvalidArgument:
      return Status::InvalidArgument(std::move(m));
    case rocksdb::Status::kIOError:
      if (s.IsNoSpace()) return Status::ResourceExhausted(std::move(m));
      return Status::Unavailable(std::move(m));
    case rocksdb::Status::kTimedOut:
      return Status::DeadlineExceeded(std::move(m));
    case rocksdb::Status::kAborted:
      return Status::Aborted(std::move(m));
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kIncomplete:
    case rocksdb::Status::kShutdownInProgress:
      return Status::Unavailable(std::move(m));
    default:
      return Status::Internal(std::move(m));
  }
}

void EncodeRowKey(int64_t id, char* key) {
  uint64_t v = static_cast<uint64_t>(id);
  for (int i = 7; i >= 0; --i, v >>= 8) key[i] = static_cast<char>(v & 0xff);
}

int64_t DecodeRowKey(const char* key) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(key[i]);
  return static_cast<int64_t>(v);
}

void EncodeRowValue(const float* row, int width, char* value) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(value, row, sizeof(float) * width);
  } else {
    for (int c = 0; c < width; ++c) {
      const uint32_t bits = std::bit_cast<uint32_t>(row[c]);
      for (int b = 0; b < 4; ++b) value[4 * c + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
    }
  }
}

void DecodeRowValue(const char* value, int width, float* row) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(row, value, sizeof(float) * width);
  } else {
    for (int c = 0; c < width; ++c) {
      uint32_t bits = 0;
      for (int b = 3; b >= 0; --b) bits = (bits << 8) | static_cast<uint8_t>(value[4 * c + b]);
      row[c] = std::bit_cast<float>(bits);
    }
  }
}

namespace {

// RocksDB recovers from some background errors by itself, on a thread of its
// own; the store recovers instead (RowDb::Recover), when a write needs it and
// the disk has room. Its recovery thread would race that and keep the
// database busy while the store closes it.
class RecoveredByTheStore : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status, bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

rocksdb::Options BaseOptions(rocksdb::Env* env, const std::string& path) {
  rocksdb::Options o;
  if (env != nullptr) o.env = env;
  // No LOG file on the rows' disk: once that disk is full, Debian's RocksDB
  // aborts at the next line it logs there (ps/rocks_glog_logger.h).
  o.info_log = NewGlogRocksLogger(path);
  // Embedding floats are close to random bits: compression would cost CPU on
  // every read and write and save next to nothing.
  o.compression = rocksdb::kNoCompression;
  o.max_background_jobs = 2;
  // Point lookups dominate (a request's misses, a write-back's rows): unless
  // writes come sorted (RowDbOptions::sorted_writes), the memtable hashes
  // whole keys (the "prefix" is the 8-byte key) instead of searching a skip
  // list of ~10^5 rows, which took a quarter of a tiered server's time. The
  // price is paid at flush, which sorts the memtable. The prefix also sizes
  // the memtable's and the SSTs' bloom filters. Scans (snapshots) ask for
  // total order explicitly.
  o.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kRowKeyBytes));
  o.allow_concurrent_memtable_write = false;  // only the skip-list memtable allows it
  // A row evicted again while its last write-back is still in the memtable
  // overwrites it there instead of adding a version, so the memtable fills
  // (and is sorted into an SST) less often.
  o.inplace_update_support = true;
  o.listeners.push_back(std::make_shared<RecoveredByTheStore>());
  // No preallocation: RocksDB sizes a WAL's at 1.1x the write buffer (70 MB
  // by default) even with the WAL off, which on a nearly full disk failed
  // and aborted the server as its shards were created.
  o.allow_fallocate = false;
  return o;
}

}  // namespace

RowDb::RowDb(std::string path, int row_width) : path_(std::move(path)), row_width_(row_width) {}

StatusOr<std::unique_ptr<RowDb>> RowDb::Open(const RowDbOptions& options, int row_width) {
  if (row_width <= 0) return Status::InvalidArgument("row db " + options.path + ": row_width must be positive");
  if (options.path.empty()) return Status::InvalidArgument("row db: empty path");
  std::unique_ptr<RowDb> db(new RowDb(options.path, row_width));
  rocksdb::Options o = BaseOptions(options.env, options.path);
  db->cache_ = rocksdb::NewLRUCache(options.block_cache_bytes);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = db->cache_;
  // Lookups of rows never written (most misses of a fresh table) stop at the filter.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // A point lookup finds its row in a block by hash instead of binary search.
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  o.write_buffer_size = options.write_buffer_bytes;
  // The hash memtable's buckets live in the memtable's own arena: one per 64
  // bytes of buffer (an eighth of it) leaves room for the rows; RocksDB
  // aborts when the buckets alone fill the buffer.
  if (!options.sorted_writes) {
    o.memtable_factory.reset(
        rocksdb::NewHashLinkListRepFactory(std::max<size_t>(4096, options.write_buffer_bytes / 64)));
  } else {
    // An update in place searches the skip list for the key first, for every
    // row, where a batch in id order would just append; and a batch written
    // from a buffer holds each row once.
    o.inplace_update_support = false;
  }
  // Recently evicted rows sit in the memtable; a filter over it spares the
  // skip-list search for the (many) rows that are not there.
  o.memtable_whole_key_filtering = true;
  o.memtable_prefix_bloom_size_ratio = 0.02;
  // Rows are read from mmapped SSTs: no read() call per block (a third less
  // time per lookup in a RocksDB micro-benchmark of 512-byte rows).
  o.allow_mmap_reads = true;
  // RocksDB's own flush at close waits for the memtables' flush, which can
  // wait forever after a write error (see Recover): the destructor flushes
  // instead, when the database is healthy.
  o.avoid_flush_during_shutdown = true;
  db->write_ahead_log_ = options.write_ahead_log;
  db->destroy_on_close_ = options.destroy_on_close;
  db->checkpoint_hard_links_ = options.checkpoint_hard_links;
  db->reserved_disk_bytes_ = options.reserved_disk_bytes;

  const bool exists = o.env->FileExists(options.path + "/CURRENT").ok();
  switch (options.mode) {
    case RowDbOpenMode::kOpenExisting:
      if (!exists) return Status::NotFound("row db " + options.path + ": no database there");
      break;
    case RowDbOpenMode::kCreate:
      if (exists) return Status::AlreadyExists("row db " + options.path + ": a database is there already");
      break;
    case RowDbOpenMode::kOverwrite:
      if (exists) TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::DestroyDB(options.path, o), "destroying row db " + options.path));
      break;
    case RowDbOpenMode::kOpenOrCreate:
      break;
  }
  o.create_if_missing = options.mode != RowDbOpenMode::kOpenExisting;
  rocksdb::DB* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(o, options.path, &raw), "opening row db " + options.path));
  db->db_.reset(raw);
  o.create_if_missing = false;
  db->options_ = std::make_unique<rocksdb::Options>(o);
  return db;
}

StatusOr<std::unique_ptr<RowDb>> RowDb::OpenReadOnly(const std::string& path, rocksdb::Env* env) {
  std::unique_ptr<RowDb> db(new RowDb(path, 0));
  rocksdb::Options o = BaseOptions(env, path);
  rocksdb::DB* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(o, path, &raw), "opening row db " + path + " read-only"));
  db->db_.reset(raw);
  return db;
}

RowDb::~RowDb() {
  if (db_ == nullptr) {
    if (!carried_.empty()) {
      LOG(ERROR) << "row db " << path_ << " closes with " << carried_.size()
                 << " rows never written back (it could not be reopened after a write error)";
    }
    return;
  }
  if (row_width_ > 0 && !destroy_on_close_) {
    // Without a WAL the rows written since the last flush are only in the
    // memtables. After a write error that flush could wait forever; a
    // restarted server restores from its checkpoint, not from this database.
    if (needs_reopen_.load()) {
      LOG(WARNING) << "row db " << path_ << " closes after a write error: rows written since its last flush are not kept";
    } else {
      rocksdb::Status f = db_->Flush(rocksdb::FlushOptions());
      if (!f.ok()) LOG(ERROR) << FromRocks(f, "flushing row db " + path_ + " at close");
    }
  }
  rocksdb::Status s = db_->Close();
  if (!s.ok() && !s.IsAborted()) LOG(ERROR) << FromRocks(s, "closing row db " + path_);
  if (destroy_on_close_) {
    db_.reset();
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) LOG(WARNING) << "removing row db " << path_ << ": " << ec.message();
  }
}

Status RowDb::Get(std::span<const int64_t> ids, float* rows, uint8_t* found) {
  if (row_width_ == 0) return Status::FailedPrecondition("row db " + path_ + " is open read-only: no point lookups");
  const size_t n = ids.size();
  if (n == 0) return Status::OK();
  std::vector<char> key_bytes(n * kRowKeyBytes);
  std::vector<rocksdb::Slice> keys(n);
  for (size_t i = 0; i < n; ++i) {
    EncodeRowKey(ids[i], &key_bytes[i * kRowKeyBytes]);
    keys[i] = rocksdb::Slice(&key_bytes[i * kRowKeyBytes], kRowKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  std::shared_lock lock(mu_);
  if (db_ == nullptr) {
    // Rows carried out of the failed reopen are served; any other row may or
    // may not be on disk, which only an open database can say.
    for (size_t i = 0; i < n; ++i) {
      auto it = carried_.find(std::string(keys[i].data(), kRowKeyBytes));
      if (it == carried_.end()) {
        return Status::Unavailable("row db " + path_ + " is closed: reopening it after a write error failed");
      }
      DecodeRowValue(it->second.data(), row_width_, rows + i * row_width_);
      found[i] = 1;
    }
    rows_read_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    return Status::OK();
  }
  db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, keys.data(), values.data(), statuses.data());
  const size_t row_bytes = sizeof(float) * row_width_;
  int64_t bytes = 0, rows_found = 0;
  for (size_t i = 0; i < n; ++i) {
    found[i] = 0;
    if (statuses[i].IsNotFound()) continue;
    TESSERA_RETURN_IF_ERROR(FromRocks(statuses[i], "reading row " + std::to_string(ids[i]) + " from " + path_));
    if (values[i].size() != row_bytes) {
      return Status::DataLoss("row " + std::to_string(ids[i]) + " in " + path_ + " has " +
                              std::to_string(values[i].size()) + " bytes, expected " + std::to_string(row_bytes));
    }
    DecodeRowValue(values[i].data(), row_width_, rows + i * row_width_);
    found[i] = 1;
    ++rows_found;
    bytes += static_cast<int64_t>(row_bytes);
  }
  if (!carried_.empty()) {
    for (size_t i = 0; i < n; ++i) {
      auto it = carried_.find(std::string(keys[i].data(), kRowKeyBytes));
      if (it == carried_.end()) continue;
      DecodeRowValue(it->second.data(), row_width_, rows + i * row_width_);
      if (!found[i]) ++rows_found;
      found[i] = 1;
    }
  }
  // Rows read are rows found: a lookup of an absent row reads none (the
  // rocksdb tier's misses count those).
  rows_read_.fetch_add(rows_found, std::memory_order_relaxed);
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::OK();
}

Status RowDb::Put(std::span<const int64_t> ids, const float* const* rows) {
  if (row_width_ == 0) return Status::FailedPrecondition("row db " + path_ + " is open read-only");
  if (ids.empty()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(Recover());
  const size_t row_bytes = sizeof(float) * row_width_;
  // In key order: the memtable's skip list then inserts each key next to the
  // last one instead of searching from the top (several times faster).
  std::vector<uint32_t> order(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) order[i] = static_cast<uint32_t>(i);
  if (!std::is_sorted(ids.begin(), ids.end())) {
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ids[a] < ids[b]; });
  }
  rocksdb::WriteBatch batch(ids.size() * (kRowKeyBytes + row_bytes + 16));
  std::string value(row_bytes, '\0');
  char key[kRowKeyBytes];
  for (const uint32_t i : order) {
    EncodeRowKey(ids[i], key);
    EncodeRowValue(rows[i], row_width_, value.data());
    TESSERA_RETURN_IF_ERROR(FromRocks(batch.Put(rocksdb::Slice(key, kRowKeyBytes), value), "batching rows for " + path_));
  }
  rocksdb::WriteOptions wo;
  wo.disableWAL = !write_ahead_log_;
  std::shared_lock lock(mu_);
  if (db_ == nullptr || needs_reopen_.load()) {
    return Status::ResourceExhausted("writing " + std::to_string(ids.size()) + " rows to " + path_ +
                                     ": it is recovering from a write error");
  }
  if (reserved_disk_bytes_ > 0) {
    TESSERA_RETURN_IF_ERROR(CheckRoom("writing " + std::to_string(ids.size()) + " rows to " + path_, reserved_disk_bytes_));
  }
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) {
    needs_reopen_ = true;
    return FromRocks(s, "writing " + std::to_string(ids.size()) + " rows to " + path_);
  }
  rows_written_.fetch_add(static_cast<int64_t>(ids.size()), std::memory_order_relaxed);
  bytes_written_.fetch_add(static_cast<int64_t>(ids.size() * (kRowKeyBytes + row_bytes)), std::memory_order_relaxed);
  return Status::OK();
}

Status RowDb::Scan(int64_t begin, int64_t end,
                   const std::function<Status(int64_t id, const float* row, int width)>& fn) {
  if (begin < 0) begin = 0;
  if (end <= begin) return Status::OK();
  char lo[kRowKeyBytes], hi[kRowKeyBytes];
  EncodeRowKey(begin, lo);
  EncodeRowKey(end, hi);
  const rocksdb::Slice upper(hi, kRowKeyBytes);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  ro.fill_cache = false;  // a scan would flush the working set out of the block cache
  ro.total_order_seek = true;  // across keys, not within one "prefix"
  std::shared_lock lock(mu_);
  if (db_ == nullptr || !carried_.empty()) {
    return Status::Unavailable("scanning row db " + path_ + ": it is recovering from a write error");
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::vector<float> row;
  for (it->Seek(rocksdb::Slice(lo, kRowKeyBytes)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != kRowKeyBytes || v.size() % sizeof(float) != 0 ||
        (row_width_ > 0 && v.size() != sizeof(float) * row_width_)) {
      return Status::DataLoss("row db " + path_ + ": malformed row (key of " + std::to_string(k.size()) +
                              " bytes, value of " + std::to_string(v.size()) + " bytes)");
    }
    const int width = static_cast<int>(v.size() / sizeof(float));
    row.resize(width);
    DecodeRowValue(v.data(), width, row.data());
    rows_read_.fetch_add(1, std::memory_order_relaxed);
    bytes_read_.fetch_add(static_cast<int64_t>(v.size()), std::memory_order_relaxed);
    TESSERA_RETURN_IF_ERROR(fn(DecodeRowKey(k.data()), row.data(), width));
  }
  return FromRocks(it->status(), "scanning row db " + path_);
}

StatusOr<int64_t> RowDb::CountRows() {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.total_order_seek = true;
  std::shared_lock lock(mu_);
  if (db_ == nullptr) return Status::Unavailable("counting rows of " + path_ + ": it is closed");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  int64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
  TESSERA_RETURN_IF_ERROR(FromRocks(it->status(), "counting rows of " + path_));
  return n;
}

Status RowDb::CheckRoom(const std::string& what, uint64_t reserve) const {
  if (options_ == nullptr) return Status::OK();
  uint64_t free_bytes = 0;
  if (!options_->env->GetFreeSpace(path_, &free_bytes).ok()) return Status::OK();
  uint64_t unflushed = 0;
  if (db_ != nullptr && !db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &unflushed)) unflushed = 0;
  // Rows a failed reopen left to be written back (db_ is then null).
  for (const auto& [key, value] : carried_) unflushed += key.size() + value.size();
  // Beyond the rows: an SST's index and filter blocks, a manifest edit.
  constexpr uint64_t kMarginBytes = 1 << 20;
  const uint64_t need = unflushed + kMarginBytes + reserve;
  if (free_bytes >= need) return Status::OK();
  return Status::ResourceExhausted(what + ": the disk has " + std::to_string(free_bytes) + " bytes free, " +
                                   std::to_string(need) + " needed (the unflushed rows and " +
                                   std::to_string(reserve) + " bytes kept free)");
}

// Why not DB::Resume(): RocksDB 7.8's Resume() flushes the memtables and waits
// for that flush, and a memtable whose flush failed on the full disk can be
// left where no flush is ever scheduled for it again; Resume() then waits
// forever (a stuck write-back thread: 1 disk-full episode in about 25 in
// write_back_buffer_test, even with RocksDB's own recovery off). Closing the
// database waits for no flush. So: take the memtables' rows out, close, open
// again, write them back. Without a WAL those rows exist nowhere else.
Status RowDb::Recover() {
  if (!needs_reopen_.load()) return Status::OK();
  if (options_ == nullptr) return Status::FailedPrecondition("row db " + path_ + " is open read-only: nothing to recover");
  std::unique_lock lock(mu_);
  if (!needs_reopen_.load()) return Status::OK();  // another thread recovered it
  // Writing the rows back needs room; where the file system can say, wait for it.
  TESSERA_RETURN_IF_ERROR(CheckRoom("recovering " + path_ + " from a write error", reserved_disk_bytes_));
  return ReopenLocked();
}

Status RowDb::ReopenLocked() {
  if (db_ != nullptr) {
    rocksdb::ReadOptions ro;
    ro.read_tier = rocksdb::kMemtableTier;  // the memtables' rows only: the SSTs stay
    ro.total_order_seek = true;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    std::map<std::string, std::string> taken;
    for (it->SeekToFirst(); it->Valid(); it->Next()) taken.emplace(it->key().ToString(), it->value().ToString());
    TESSERA_RETURN_IF_ERROR(FromRocks(it->status(), "reading the unflushed rows of " + path_));
    it.reset();
    // Taken before this reopen and not yet written back: older than these.
    taken.merge(carried_);
    carried_ = std::move(taken);
    // Close reports the write error that stopped the database; nothing to add.
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
  rocksdb::DB* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(*options_, path_, &raw), "reopening row db " + path_));
  db_.reset(raw);
  if (!carried_.empty()) {
    rocksdb::WriteBatch batch;
    for (const auto& [key, value] : carried_) {
      TESSERA_RETURN_IF_ERROR(FromRocks(batch.Put(key, value), "batching the unflushed rows of " + path_));
    }
    rocksdb::WriteOptions wo;
    wo.disableWAL = !write_ahead_log_;
    TESSERA_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "writing back the unflushed rows of " + path_));
  }
  LOG(WARNING) << "row db " << path_ << " reopened after a write error; " << carried_.size()
               << " unflushed rows carried over";
  carried_.clear();
  needs_reopen_ = false;
  return Status::OK();
}

Status RowDb::Flush() {
  TESSERA_RETURN_IF_ERROR(Recover());
  std::shared_lock lock(mu_);
  if (db_ == nullptr || needs_reopen_.load()) return Status::ResourceExhausted("flushing row db " + path_ + ": it is recovering from a write error");
  if (reserved_disk_bytes_ > 0) TESSERA_RETURN_IF_ERROR(CheckRoom("flushing row db " + path_, reserved_disk_bytes_));
  rocksdb::Status s = db_->Flush(rocksdb::FlushOptions());
  if (!s.ok()) needs_reopen_ = true;
  return FromRocks(s, "flushing row db " + path_);
}

Status RowDb::Checkpoint(const std::string& dir) {
  // A checkpoint flushes the memtables first: a stopped database must recover.
  TESSERA_RETURN_IF_ERROR(Recover());
  std::shared_lock lock(mu_);
  if (db_ == nullptr || needs_reopen_.load()) return Status::ResourceExhausted("checkpointing " + path_ + ": it is recovering from a write error");
  if (reserved_disk_bytes_ > 0) TESSERA_RETURN_IF_ERROR(CheckRoom("checkpointing " + path_, reserved_disk_bytes_));
  rocksdb::Checkpoint* raw = nullptr;
  TESSERA_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "checkpointing " + path_));
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // log_size_for_flush = 0: flush the memtable first, so the copy needs no WAL.
  TESSERA_RETURN_IF_ERROR(
      FromRocks(cp->CreateCheckpoint(dir, /*log_size_for_flush=*/0), "checkpointing " + path_ + " to " + dir));
  if (checkpoint_hard_links_) return Status::OK();
  std::lock_guard<std::mutex> last(checkpoint_mu_);
  DetachStats detached;
  // The copies land on the spill disk: they must leave it the room the
  // store keeps free, as every write of its own does.
  auto room = [&](int64_t bytes) {
    if (reserved_disk_bytes_ == 0) return Status::OK();
    return CheckRoom("copying " + std::to_string(bytes) + " bytes of " + path_ + " into checkpoint " + dir,
                     reserved_disk_bytes_ + static_cast<uint64_t>(bytes));
  };
  TESSERA_RETURN_IF_ERROR(DetachFromLive(path_, dir, last_checkpoint_, room, &detached)
                              .WithContext("checkpointing " + path_ + " to " + dir));
  VLOG(1) << "checkpoint " << dir << " of " << path_ << ": " << detached.files_copied << " file(s) copied ("
          << detached.bytes_copied << " bytes), " << detached.files_linked << " linked to " << last_checkpoint_;
  last_checkpoint_ = dir;
  return Status::OK();
}

void RowDb::AddTraffic(RowStoreStats* stats) const {
  stats->rocksdb_rows_read += rows_read_.load(std::memory_order_relaxed);
  stats->rocksdb_bytes_read += bytes_read_.load(std::memory_order_relaxed);
  stats->rocksdb_rows_written += rows_written_.load(std::memory_order_relaxed);
  stats->rocksdb_bytes_written += bytes_written_.load(std::memory_order_relaxed);
  std::map<std::string, std::string> cf;
  std::shared_lock lock(mu_);
  if (db_ && db_->GetMapProperty(rocksdb::DB::Properties::kCFStats, &cf)) {
    for (const char* key : {"io_stalls.total_stop", "io_stalls.total_slowdown"}) {
      auto it = cf.find(key);
      if (it != cf.end()) stats->rocksdb_write_stalls += std::strtoll(it->second.c_str(), nullptr, 10);
    }
  }
}

namespace {

class RocksRowStore final : public RowStore, public RocksCheckpointable {
 public:
  RocksRowStore(RowStoreOptions options, std::unique_ptr<RowDb> db, int64_t rows)
      : RowStore(std::move(options)), db_(std::move(db)), size_(rows) {}

  Status Read(std::span<const int64_t> ids, const ReadFn& fn) override {
    std::vector<float> rows;
    std::vector<float*> ptrs;
    TESSERA_RETURN_IF_ERROR(Load(ids, &rows, &ptrs, nullptr));
    fn(ptrs.data(), static_cast<int64_t>(ids.size()));
    return Status::OK();
  }

  Status Update(std::span<const int64_t> ids, const UpdateFn& fn) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    std::vector<float> rows;
    std::vector<float*> ptrs;
    int64_t added = 0;
    TESSERA_RETURN_IF_ERROR(Load(ids, &rows, &ptrs, &added));
    fn(ptrs.data(), static_cast<int64_t>(ids.size()));
    TESSERA_RETURN_IF_ERROR(db_->Put(ids, ptrs.data()));
    size_ += added;
    return Status::OK();
  }

  Status Put(std::span<const int64_t> ids, const float* rows) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    std::vector<float> old;
    std::vector<float*> unused;
    int64_t added = 0;
    TESSERA_RETURN_IF_ERROR(Load(ids, &old, &unused, &added));  // which ids are new
    std::vector<const float*> ptrs(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ptrs[i] = rows + i * row_width();
    TESSERA_RETURN_IF_ERROR(db_->Put(ids, ptrs.data()));
    size_ += added;
    return Status::OK();
  }

  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    return db_->Scan(0, std::numeric_limits<int64_t>::max(),
                     [&](int64_t id, const float* row, int) { return fn(id, row); });
  }

  int64_t size() const override { return size_.load(); }

  RowStoreStats Stats() const override {
    RowStoreStats s;
    TierStats t;
    t.name = "rocksdb";
    t.hits = hits_.load(std::memory_order_relaxed);
    t.misses = misses_.load(std::memory_order_relaxed);
    t.rows_resident = size_.load();
    t.bytes_resident = t.rows_resident * static_cast<int64_t>(kRowKeyBytes + sizeof(float) * row_width());
    s.tiers.push_back(t);
    db_->AddTraffic(&s);
    return s;
  }

  Status Flush() override { return db_->Flush(); }

  Status CheckpointTo(const std::string& dir) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    return db_->Checkpoint(dir);
  }

 private:
  // Reads the rows of ids into *rows (initial values for those not stored)
  // and points (*ptrs)[i] at row i; *added (if set) counts the rows not stored.
  Status Load(std::span<const int64_t> ids, std::vector<float>* rows, std::vector<float*>* ptrs, int64_t* added) {
    const int w = row_width();
    rows->resize(ids.size() * w);
    ptrs->resize(ids.size());
    std::vector<uint8_t> found(ids.size());
    TESSERA_RETURN_IF_ERROR(db_->Get(ids, rows->data(), found.data()));
    int64_t missing = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      (*ptrs)[i] = rows->data() + i * w;
      if (!found[i]) {
        options_.init(ids[i], (*ptrs)[i]);
        ++missing;
      }
    }
    hits_.fetch_add(static_cast<int64_t>(ids.size()) - missing, std::memory_order_relaxed);
    misses_.fetch_add(missing, std::memory_order_relaxed);
    if (added != nullptr) *added = missing;
    return Status::OK();
  }

  std::unique_ptr<RowDb> db_;
  std::mutex write_mu_;          // one Update or Put at a time: read, modify, write
  std::atomic<int64_t> size_;    // rows stored; changed under write_mu_
  std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace

StatusOr<std::unique_ptr<RowStore>> OpenRocksRowStore(const RocksRowStoreOptions& options) {
  if (options.rows.row_width <= 0 || options.rows.gather_cols < 0 || options.rows.gather_cols > options.rows.row_width ||
      !options.rows.init) {
    return Status::InvalidArgument("rocks row store " + options.db.path +
                                   ": needs row_width > 0, 0 <= gather_cols <= row_width and an initializer");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowDb> db, RowDb::Open(options.db, options.rows.row_width));
  TESSERA_ASSIGN_OR_RETURN(int64_t rows, db->CountRows());
  return std::unique_ptr<RowStore>(std::make_unique<RocksRowStore>(options.rows, std::move(db), rows));
}

}  // namespace tessera
