// The write-back buffer's promises: reads see the newest value stored, from
// either buffer or RocksDB, at every moment (also while a buffer is being
// written); everything stored reaches RocksDB in the end; a failed write
// keeps the rows and fails only the store that needs their room.
#include "ps/write_back_buffer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "ps/rocks_fault_injection.h"

namespace tessera {
namespace {

constexpr int kWidth = 4;
constexpr size_t kRowBytes = kWidth * sizeof(float) + sizeof(int64_t);

class WriteBackBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "write_back_buffer_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<LowerTier> Open(size_t buffer_rows, rocksdb::Env* env = nullptr,
                                  size_t write_buffer_bytes = RowDbOptions().write_buffer_bytes) {
    RowDbOptions o;
    o.path = dir_ + "/db";
    o.sorted_writes = true;
    o.env = env;
    o.write_buffer_bytes = write_buffer_bytes;
    auto db = RowDb::Open(o, kWidth);
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return nullptr;
    return NewWriteBackBufferTier(NewRocksLowerTier(std::move(db).value()), "test tier", buffer_rows * kRowBytes,
                                  kWidth);
  }

  std::string dir_;
};

std::vector<float> RowOf(int64_t id, float version) { return {static_cast<float>(id), version, -version, 0.5f}; }

Status StoreRows(LowerTier& t, const std::vector<int64_t>& ids, float version) {
  std::vector<std::vector<float>> rows;
  std::vector<const float*> ptrs;
  for (int64_t id : ids) rows.push_back(RowOf(id, version));
  for (const auto& r : rows) ptrs.push_back(r.data());
  return t.Store(ids, ptrs.data());
}

// The version each id holds below (-1: none), checked for its other columns.
std::vector<float> Versions(LowerTier& t, const std::vector<int64_t>& ids) {
  std::vector<float> rows(ids.size() * kWidth);
  std::vector<uint8_t> found(ids.size());
  EXPECT_TRUE(t.Fetch(ids, rows.data(), found.data()).ok());
  std::vector<float> v(ids.size(), -1.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!found[i]) continue;
    const float* r = &rows[i * kWidth];
    EXPECT_EQ(r[0], static_cast<float>(ids[i]));
    EXPECT_EQ(r[2], -r[1]);
    v[i] = r[1];
  }
  return v;
}

TEST_F(WriteBackBufferTest, ReadsSeeTheNewestValueWhereverItIs) {
  auto tier = Open(/*buffer_rows=*/8);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(StoreRows(*tier, {1, 2, 3}, 1).ok());
  ASSERT_TRUE(StoreRows(*tier, {2}, 2).ok());  // overwritten in the same buffer
  EXPECT_EQ(Versions(*tier, {1, 2, 3, 4}), (std::vector<float>{1, 2, 1, -1}));
  // Fill past one buffer: 1..3 go to the writer, the new values stay newest.
  ASSERT_TRUE(StoreRows(*tier, {10, 11, 12, 13, 14, 15}, 3).ok());
  ASSERT_TRUE(StoreRows(*tier, {1, 20}, 4).ok());
  EXPECT_EQ(Versions(*tier, {1, 2, 3, 10, 20}), (std::vector<float>{4, 2, 1, 3, 4}));
  ASSERT_TRUE(tier->Flush().ok());
  EXPECT_EQ(Versions(*tier, {1, 2, 3, 10, 20}), (std::vector<float>{4, 2, 1, 3, 4}));
  auto count = tier->CountRows();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 10);  // 1, 2, 3, 10..15, 20
}

TEST_F(WriteBackBufferTest, EverythingStoredReachesRocksDbWithItsLastValue) {
  std::map<int64_t, float> model;
  {
    auto tier = Open(/*buffer_rows=*/100);
    ASSERT_NE(tier, nullptr);
    std::mt19937_64 rng(7);
    for (int batch = 0; batch < 300; ++batch) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int64_t>(rng() % 5000));
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      ASSERT_TRUE(StoreRows(*tier, ids, static_cast<float>(batch)).ok());
      for (int64_t id : ids) model[id] = static_cast<float>(batch);
    }
    // ForEach writes both buffers first, then visits RocksDB in id order.
    std::map<int64_t, float> seen;
    int64_t last = -1;
    ASSERT_TRUE(tier->ForEach([&](int64_t id, const float* row) {
      EXPECT_GT(id, last);
      last = id;
      seen[id] = row[1];
      return Status::OK();
    }).ok());
    EXPECT_EQ(seen, model);
  }
  // And it is still there after the tier is gone and the database reopened.
  RowDbOptions o;
  o.path = dir_ + "/db";
  o.mode = RowDbOpenMode::kOpenExisting;
  auto db = RowDb::Open(o, kWidth);
  ASSERT_TRUE(db.ok()) << db.status();
  std::map<int64_t, float> reopened;
  ASSERT_TRUE((*db)->Scan(0, 1 << 20, [&](int64_t id, const float* row, int) {
    reopened[id] = row[1];
    return Status::OK();
  }).ok());
  EXPECT_EQ(reopened, model);
}

// A reader that once saw a version of a row never sees an older one or none,
// whichever buffer the row sits in or moves out of meanwhile.
TEST_F(WriteBackBufferTest, ReadersNeverSeeARowGoBackWhileBuffersAreWritten) {
  auto tier = Open(/*buffer_rows=*/64);
  ASSERT_NE(tier, nullptr);
  constexpr int64_t kIds = 512;
  std::atomic<bool> done{false};
  std::atomic<int64_t> violations{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::vector<float> last(kIds, -1.0f);
      std::mt19937_64 rng(r);
      while (!done.load()) {
        std::vector<int64_t> ids;
        for (int i = 0; i < 32; ++i) ids.push_back(static_cast<int64_t>(rng() % kIds));
        const std::vector<float> v = Versions(*tier, ids);
        for (size_t i = 0; i < ids.size(); ++i) {
          if (v[i] < last[ids[i]]) violations.fetch_add(1);
          last[ids[i]] = std::max(last[ids[i]], v[i]);
        }
        reads.fetch_add(1);
      }
    });
  }
  std::mt19937_64 rng(99);
  for (int version = 0; version < 2000; ++version) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 16; ++i) ids.push_back(static_cast<int64_t>(rng() % kIds));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    ASSERT_TRUE(StoreRows(*tier, ids, static_cast<float>(version)).ok());
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(violations.load(), 0);
}

// As in production (no write-ahead log): RocksDB takes the rows into its
// memtable, fails to flush it to the full disk in the background, and then
// refuses writes; the buffer keeps what it could not write.
TEST_F(WriteBackBufferTest, AFailedWriteKeepsTheRowsAndFailsOnlyTheStoreThatNeedsTheirRoom) {
  FaultFs fault;
  auto tier = Open(/*buffer_rows=*/200, fault.env(), /*write_buffer_bytes=*/64 << 10);  // RocksDB's smallest
  ASSERT_NE(tier, nullptr);
  fault.SetBytesLeft(0);
  std::map<int64_t, float> acknowledged;
  Status failed;
  std::vector<int64_t> ids;
  for (int batch = 0; batch < 5000 && failed.ok(); ++batch) {
    ids.clear();
    for (int64_t i = 0; i < 100; ++i) ids.push_back(batch * 100 + i);
    failed = StoreRows(*tier, ids, static_cast<float>(batch));
    if (failed.ok()) {
      for (int64_t id : ids) acknowledged[id] = static_cast<float>(batch);
    }
  }
  ASSERT_FALSE(failed.ok()) << "the injected fault never fired";
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed;
  EXPECT_NE(tier->Flush().code(), StatusCode::kOk);
  // The failed batch stored nothing; every acknowledged row is still served.
  for (float v : Versions(*tier, ids)) EXPECT_EQ(v, -1.0f);
  std::vector<int64_t> all;
  std::vector<float> want;
  for (const auto& [id, v] : acknowledged) {
    all.push_back(id);
    want.push_back(v);
  }
  EXPECT_EQ(Versions(*tier, all), want);

  fault.SetBytesLeft(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(tier->Flush().ok());
  std::map<int64_t, float> stored;
  ASSERT_TRUE(tier->ForEach([&](int64_t id, const float* row) {
    stored[id] = row[1];
    return Status::OK();
  }).ok());
  EXPECT_EQ(stored, acknowledged);
}

}  // namespace
}  // namespace tessera
