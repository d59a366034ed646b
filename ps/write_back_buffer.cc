#include "ps/write_back_buffer.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "kernels/row_init.h"

namespace tessera {
namespace {

// Rows by id in arrival order; a row stored again is overwritten in place.
class RowBuffer {
 public:
  explicit RowBuffer(int width) : width_(width) { Rehash(1024); }

  bool empty() const { return ids_.empty(); }
  size_t size() const { return ids_.size(); }

  const float* Find(int64_t id) const {
    for (uint64_t pos = Hash(id) & mask_;; pos = (pos + 1) & mask_) {
      const int32_t at = table_[pos];
      if (at < 0) return nullptr;
      if (ids_[at] == id) return &rows_[static_cast<size_t>(at) * width_];
    }
  }

  void Put(int64_t id, const float* row) {
    uint64_t pos = Hash(id) & mask_;
    for (;; pos = (pos + 1) & mask_) {
      const int32_t at = table_[pos];
      if (at < 0) break;
      if (ids_[at] == id) {
        std::memcpy(&rows_[static_cast<size_t>(at) * width_], row, sizeof(float) * width_);
        return;
      }
    }
    CHECK_LT(ids_.size(), static_cast<size_t>(std::numeric_limits<int32_t>::max()));
    table_[pos] = static_cast<int32_t>(ids_.size());
    ids_.push_back(id);
    rows_.insert(rows_.end(), row, row + width_);
    // Keep the load factor under 1/2 so probes stay short.
    if (ids_.size() * 2 > mask_ + 1) Rehash((mask_ + 1) * 2);
  }

  // Empties the buffer and keeps its memory for the next fill.
  void Clear() {
    ids_.clear();
    rows_.clear();
    std::fill(table_.begin(), table_.end(), -1);
  }

  // The buffer's rows in ascending id order.
  void Sorted(std::vector<int64_t>* ids, std::vector<const float*>* rows) const {
    std::vector<int32_t> order(ids_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids_[a] < ids_[b]; });
    ids->resize(order.size());
    rows->resize(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      (*ids)[i] = ids_[order[i]];
      (*rows)[i] = &rows_[static_cast<size_t>(order[i]) * width_];
    }
  }

 private:
  static uint64_t Hash(int64_t id) { return kernels::SplitMix64(static_cast<uint64_t>(id)); }

  void Rehash(uint64_t capacity) {
    table_.assign(capacity, -1);
    mask_ = capacity - 1;
    for (size_t at = 0; at < ids_.size(); ++at) {
      uint64_t pos = Hash(ids_[at]) & mask_;
      while (table_[pos] >= 0) pos = (pos + 1) & mask_;
      table_[pos] = static_cast<int32_t>(at);
    }
  }

  int width_;
  std::vector<int64_t> ids_;
  std::vector<float> rows_;     // ids_.size() rows of width_
  std::vector<int32_t> table_;  // position in ids_, or -1
  uint64_t mask_ = 0;
};

class WriteBackBufferTier final : public LowerTier {
 public:
  WriteBackBufferTier(std::unique_ptr<LowerTier> below, std::string name, size_t buffer_bytes, int width)
      : below_(std::move(below)),
        name_(std::move(name)),
        width_(width),
        buffer_rows_(std::max<size_t>(1, buffer_bytes / (sizeof(float) * width + sizeof(int64_t)))),
        filling_(width),
        writing_(width),
        writer_([this] { WriterLoop(); }) {}

  ~WriteBackBufferTier() override {
    {
      std::lock_guard<std::shared_mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    writer_.join();
    // The tier above flushes before it lets go of this one; rows still here
    // mean that flush failed. One last try, oldest first.
    for (RowBuffer* b : {&writing_, &filling_}) {
      if (b->empty()) continue;
      Status s = WriteRows(*b);
      if (!s.ok()) LOG(ERROR) << "closing " << name_ << ": " << b->size() << " rows not written: " << s;
    }
  }

  Status Fetch(std::span<const int64_t> ids, float* rows, uint8_t* found) override {
    std::vector<int64_t> rest;
    std::vector<size_t> where;
    int64_t hits = 0;  // in a buffer
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      for (size_t i = 0; i < ids.size(); ++i) {
        const float* row = filling_.Find(ids[i]);
        if (row == nullptr) row = writing_.Find(ids[i]);
        if (row != nullptr) {
          std::memcpy(rows + i * width_, row, sizeof(float) * width_);
          found[i] = 1;
          ++hits;
        } else {
          rest.push_back(ids[i]);
          where.push_back(i);
        }
      }
    }
    hits_.fetch_add(hits, std::memory_order_relaxed);
    // Rows absent from both buffers are below, if anywhere: a buffer leaves
    // only once the tier below holds its rows.
    if (!rest.empty()) {
      std::vector<float> got(rest.size() * width_);
      std::vector<uint8_t> got_found(rest.size());
      TESSERA_RETURN_IF_ERROR(below_->Fetch(rest, got.data(), got_found.data()));
      for (size_t k = 0; k < rest.size(); ++k) {
        found[where[k]] = got_found[k];
        if (got_found[k]) std::memcpy(rows + where[k] * width_, &got[k * width_], sizeof(float) * width_);
      }
    }
    return Status::OK();
  }

  Status Store(std::span<const int64_t> ids, const float* const* rows) override {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (!filling_.empty() && filling_.size() + ids.size() > buffer_rows_) TESSERA_RETURN_IF_ERROR(HandOver(lock));
    for (size_t i = 0; i < ids.size(); ++i) filling_.Put(ids[i], rows[i]);
    return Status::OK();
  }

  Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) override {
    TESSERA_RETURN_IF_ERROR(WriteAll());
    return below_->ForEach(fn);
  }
  StatusOr<int64_t> CountRows() override {
    TESSERA_RETURN_IF_ERROR(WriteAll());
    return below_->CountRows();
  }
  Status Flush() override {
    TESSERA_RETURN_IF_ERROR(WriteAll());
    return below_->Flush();
  }
  Status Checkpoint(const std::string& dir) override {
    TESSERA_RETURN_IF_ERROR(WriteAll());
    return below_->Checkpoint(dir);
  }
  // The buffers are part of the tier below: rows found in them count as its
  // hits, as they did when RocksDB's memtable held them.
  void AddStats(int64_t rows_stored, RowStoreStats* stats) const override {
    const size_t before = stats->tiers.size();
    below_->AddStats(rows_stored, stats);
    if (stats->tiers.size() > before) stats->tiers[before].hits += hits_.load(std::memory_order_relaxed);
  }

 private:
  Status WriteRows(const RowBuffer& b) {
    std::vector<int64_t> ids;
    std::vector<const float*> rows;
    b.Sorted(&ids, &rows);
    return below_->Store(ids, rows.data());
  }

  // Waits until the buffer being written is written, asking for another try
  // when the last one failed; that try's error if it fails too.
  // REQUIRES: lock holds mu_.
  Status WaitWritten(std::unique_lock<std::shared_mutex>& lock) {
    if (writing_.empty()) return Status::OK();
    if (requested_ == done_) {
      ++requested_;
      cv_.notify_all();
    }
    const uint64_t want = requested_;
    cv_.wait(lock, [&] { return done_ >= want; });
    return writing_.empty() ? Status::OK() : last_error_;
  }

  // Hands the filled buffer to the writer once it is free. REQUIRES: lock holds mu_.
  Status HandOver(std::unique_lock<std::shared_mutex>& lock) {
    TESSERA_RETURN_IF_ERROR(WaitWritten(lock));
    std::swap(filling_, writing_);
    ++requested_;
    cv_.notify_all();
    return Status::OK();
  }

  // Both buffers into RocksDB (its memtable), oldest first.
  Status WriteAll() {
    std::unique_lock<std::shared_mutex> lock(mu_);
    TESSERA_RETURN_IF_ERROR(WaitWritten(lock));
    if (filling_.empty()) return Status::OK();
    TESSERA_RETURN_IF_ERROR(HandOver(lock));
    return WaitWritten(lock);
  }

  void WriterLoop() {
    pthread_setname_np(pthread_self(), "writeback");  // so profiles and top tell it apart
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || requested_ > done_; });
      if (stop_) return;
      const uint64_t attempt = requested_;
      // No one changes writing_ while a try is asked for and not done
      // (HandOver waits for it), so it is read without mu_; readers share it.
      lock.unlock();
      Status s = WriteRows(writing_);
      lock.lock();
      if (s.ok()) {
        writing_.Clear();
      } else {
        LOG(WARNING) << "writing back " << writing_.size() << " rows to " << name_
                     << " failed (kept in memory; retried when room is needed): " << s;
        last_error_ = s;
      }
      done_ = attempt;
      cv_.notify_all();
    }
  }

  const std::unique_ptr<LowerTier> below_;
  const std::string name_;  // for logs
  const int width_;
  const size_t buffer_rows_;
  mutable std::shared_mutex mu_;
  std::condition_variable_any cv_;
  RowBuffer filling_;           // GUARDED_BY(mu_): rows stored since the last hand-over
  RowBuffer writing_;           // rows being written; changed under mu_ only when no try is pending
  uint64_t requested_ = 0;      // GUARDED_BY(mu_): tries at writing writing_ asked for
  uint64_t done_ = 0;           // GUARDED_BY(mu_): ... and finished
  Status last_error_;           // GUARDED_BY(mu_): of the last failed try
  bool stop_ = false;           // GUARDED_BY(mu_)
  std::atomic<int64_t> hits_{0};  // rows fetched from a buffer
  std::thread writer_;          // last: starts once the rest is built
};

}  // namespace

std::unique_ptr<LowerTier> NewWriteBackBufferTier(std::unique_ptr<LowerTier> below, std::string name,
                                                  size_t buffer_bytes, int row_width) {
  CHECK_GT(buffer_bytes, 0u);
  CHECK_GT(row_width, 0);
  return std::make_unique<WriteBackBufferTier>(std::move(below), std::move(name), buffer_bytes, row_width);
}

}  // namespace tessera
