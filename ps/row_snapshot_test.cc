// Snapshots: round trips from every kind of store, range scans (a restore onto
// a different sharding reads ranges), and incomplete snapshots refused.
#include "ps/row_snapshot.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "ps/rocks_row_store.h"
#include "ps/tiered_row_store.h"

namespace tessera {
namespace {

constexpr int kWidth = 3;
using Rows = std::map<int64_t, std::vector<float>>;

void TestInit(int64_t id, float* row) {
  for (int i = 0; i < kWidth; ++i) row[i] = static_cast<float>(id * 10 + i);
}

RowStoreOptions RowOptions() {
  RowStoreOptions o;
  o.row_width = kWidth;
  o.gather_cols = kWidth;
  o.init = TestInit;
  return o;
}

// Rows of the snapshot at dir with id in [begin, end), checking that each
// comes once, in runs no longer than promised, and that the count announced
// up front (rows.bin) is the count visited.
Rows Scan(const std::string& dir, int64_t begin = 0, int64_t end = std::numeric_limits<int64_t>::max()) {
  Rows rows;
  int64_t expected = -1;
  Status st = ScanSnapshot(
      dir, begin, end,
      [&](std::span<const int64_t> ids, const float* run, int width) {
        EXPECT_EQ(width, kWidth);
        EXPECT_GE(ids.size(), 1u);
        EXPECT_LE(static_cast<int64_t>(ids.size()), kSnapshotRunRows);
        for (size_t i = 0; i < ids.size(); ++i) {
          EXPECT_GE(ids[i], begin);
          EXPECT_LT(ids[i], end);
          EXPECT_TRUE(rows.emplace(ids[i], std::vector<float>(run + i * width, run + (i + 1) * width)).second)
              << "row " << ids[i] << " visited twice";
        }
        return Status::OK();
      },
      [&](int64_t n) { expected = n; });
  EXPECT_TRUE(st.ok()) << st;
  if (expected >= 0) {
    EXPECT_EQ(expected, static_cast<int64_t>(rows.size()));
  }
  return rows;
}

// Writes rows 0, 7, 14, ... (300 of them) as id * 0.5 + column, via Update.
Rows Fill(RowStore& store) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 300; ++i) ids.push_back(i * 7);
  EXPECT_TRUE(store.Update(ids, [&](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < kWidth; ++c) rows[i][c] = static_cast<float>(ids[i]) * 0.5f + c;
    }
  }).ok());
  Rows want;
  for (int64_t id : ids) want[id] = {id * 0.5f, id * 0.5f + 1, id * 0.5f + 2};
  return want;
}

class RowSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "row_snapshot_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(RowSnapshotTest, MemoryStoreRoundTrip) {
  auto store = NewMemoryRowStore(RowOptions());
  const Rows want = Fill(*store);
  const nlohmann::json meta = {{"step", 42}, {"table", "t0"}, {"row_width", kWidth}};
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", meta).ok());
  auto got_meta = ReadSnapshotMeta(dir_ + "/snap");
  ASSERT_TRUE(got_meta.ok()) << got_meta.status();
  EXPECT_EQ(*got_meta, meta);
  EXPECT_EQ(Scan(dir_ + "/snap"), want);
}

TEST_F(RowSnapshotTest, RocksStoreRoundTripIsACheckpoint) {
  RocksRowStoreOptions o;
  o.rows = RowOptions();
  o.db.path = dir_ + "/db";
  auto store = OpenRocksRowStore(o);
  ASSERT_TRUE(store.ok()) << store.status();
  const Rows want = Fill(**store);
  ASSERT_TRUE(WriteSnapshot(**store, dir_ + "/snap", {{"step", 1}}).ok());
  // Later updates do not reach the snapshot.
  ASSERT_TRUE((*store)->Update(std::vector<int64_t>{0, 1}, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][0] = -1;
  }).ok());
  EXPECT_EQ(Scan(dir_ + "/snap"), want);
}

TEST_F(RowSnapshotTest, TieredStoreSnapshotHasTheDirtyResidentRows) {
  TieredRowStoreOptions o;
  o.rows = RowOptions();
  o.db.path = dir_ + "/db";
  o.host_bytes = 50 * HostTierBytesPerRow(kWidth);  // of the 300 rows, ~50 stay in memory, dirty
  auto store = OpenTieredRowStore(o);
  ASSERT_TRUE(store.ok()) << store.status();
  const Rows want = Fill(**store);
  ASSERT_GT((*store)->Stats().tier("host")->rows_resident, 0);
  ASSERT_TRUE(WriteSnapshot(**store, dir_ + "/snap", {{"step", 2}}).ok());
  EXPECT_EQ(Scan(dir_ + "/snap"), want);
}

TEST_F(RowSnapshotTest, MemoryStoreSnapshotIsOneFileAndReportsWhatItWrote) {
  auto store = NewMemoryRowStore(RowOptions());
  // 5 rows of 12 bytes: the ids after them need 4 bytes of padding.
  std::vector<int64_t> ids = {9, 3, 700, 41, 2};
  ASSERT_TRUE(store->Update(ids, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][1] = -1.5f;
  }).ok());
  SnapshotStats stats;
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", {{"step", 6}}, &stats).ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/snap/rows.bin"));
  EXPECT_EQ(stats.rows, 5);
  const int64_t file = static_cast<int64_t>(std::filesystem::file_size(dir_ + "/snap/rows.bin"));
  EXPECT_EQ(file, 32 + 5 * 12 + 4 + 5 * 8);
  EXPECT_EQ(stats.bytes, file + static_cast<int64_t>(std::filesystem::file_size(dir_ + "/snap/meta.json")));
  const Rows got = Scan(dir_ + "/snap");
  ASSERT_EQ(got.size(), 5u);
  for (int64_t id : ids) EXPECT_EQ(got.at(id), (std::vector<float>{id * 10.0f, -1.5f, id * 10.0f + 2}));
}

TEST_F(RowSnapshotTest, DamagedRowsFileIsDataLoss) {
  auto store = NewMemoryRowStore(RowOptions());
  Fill(*store);
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", {{"step", 7}}).ok());
  const std::string rows = dir_ + "/snap/rows.bin";
  auto scan = [&] {
    return ScanSnapshot(dir_ + "/snap", 0, 1 << 20, [](std::span<const int64_t>, const float*, int) { return Status::OK(); });
  };
  ASSERT_TRUE(scan().ok());
  {
    std::fstream f(rows, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char c = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(~c));
  }
  Status st = scan();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  std::filesystem::resize_file(rows, std::filesystem::file_size(rows) - 8);
  EXPECT_EQ(scan().code(), StatusCode::kDataLoss);
  std::filesystem::resize_file(rows, 10);
  EXPECT_EQ(scan().code(), StatusCode::kDataLoss);
}

TEST_F(RowSnapshotTest, RocksDbSnapshotOfACopiedStoreStillReads) {
  // Before rows.bin, copied stores were written as a RocksDB database:
  // checkpoints taken then must still restore.
  const std::string snap = dir_ + "/snap";
  {
    RowDbOptions o;
    o.path = snap;
    o.mode = RowDbOpenMode::kCreate;
    auto db = RowDb::Open(o, kWidth);
    ASSERT_TRUE(db.ok()) << db.status();
    const float a[kWidth] = {1, 2, 3}, b[kWidth] = {4, 5, 6};
    const float* rows[] = {a, b};
    ASSERT_TRUE((*db)->Put(std::vector<int64_t>{8, 5}, rows).ok());
    ASSERT_TRUE((*db)->Flush().ok());
  }
  std::ofstream(snap + "/meta.json") << "{}\n";
  EXPECT_EQ(Scan(snap), (Rows{{5, {4, 5, 6}}, {8, {1, 2, 3}}}));
}

TEST_F(RowSnapshotTest, RangesReassembleTheWhole) {
  // A restore onto another number of servers reads each new shard's range.
  auto store = NewMemoryRowStore(RowOptions());
  const Rows want = Fill(*store);
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", nlohmann::json::object()).ok());
  Rows joined;
  for (int64_t begin : {0, 500, 1000, 1500}) {
    Rows part = Scan(dir_ + "/snap", begin, begin + 500);
    for (const auto& [id, row] : part) {
      EXPECT_GE(id, begin);
      EXPECT_LT(id, begin + 500);
    }
    joined.insert(part.begin(), part.end());
  }
  Rows tail = Scan(dir_ + "/snap", 2000);
  joined.insert(tail.begin(), tail.end());
  EXPECT_EQ(joined, want);
  EXPECT_TRUE(Scan(dir_ + "/snap", 8, 14).empty());  // only 7 and 14 are near: [8, 14) holds none
  EXPECT_EQ(Scan(dir_ + "/snap", 7, 15).size(), 2u);
}

TEST_F(RowSnapshotTest, ManyRowsInStoreOrderGoInBoundedRuns) {
  // Rows touched in a shuffled order, more than one run's worth, read back
  // by ranges whose rows are scattered over the file: each row once, in runs
  // of at most kSnapshotRunRows, the count announced first.
  auto store = NewMemoryRowStore(RowOptions());
  const int64_t n = 3 * kSnapshotRunRows + 123;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 7919) % n;  // a permutation: 7919 is prime, n not its multiple
  std::vector<float> rows;
  for (int64_t id : ids) rows.insert(rows.end(), {id * 1.f, id * 2.f, id * 3.f});
  ASSERT_TRUE(store->Put(ids, rows.data()).ok());
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", nlohmann::json::object()).ok());
  const Rows all = Scan(dir_ + "/snap");
  ASSERT_EQ(static_cast<int64_t>(all.size()), n);
  for (const auto& [id, row] : all) EXPECT_EQ(row, (std::vector<float>{id * 1.f, id * 2.f, id * 3.f})) << id;
  const Rows part = Scan(dir_ + "/snap", 1000, 9000);
  EXPECT_EQ(part.size(), 8000u);
  // Reserve only sizes the store: what it holds is unchanged.
  store->Reserve(10 * n);
  EXPECT_EQ(store->size(), n);
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/again", nlohmann::json::object()).ok());
  EXPECT_EQ(Scan(dir_ + "/again"), all);
}

TEST_F(RowSnapshotTest, IncompleteSnapshotIsRefused) {
  auto store = NewMemoryRowStore(RowOptions());
  Fill(*store);
  const std::string snap = dir_ + "/snap";
  ASSERT_TRUE(WriteSnapshot(*store, snap, {{"step", 3}}).ok());
  std::filesystem::remove(snap + "/meta.json");
  Status st = ScanSnapshot(snap, 0, 100, [](std::span<const int64_t>, const float*, int) { return Status::OK(); });
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find(snap), std::string::npos);
  EXPECT_EQ(ReadSnapshotMeta(snap).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadSnapshotMeta(dir_ + "/nothing").status().code(), StatusCode::kNotFound);
}

TEST_F(RowSnapshotTest, ExistingDirectoryIsNotOverwritten) {
  auto store = NewMemoryRowStore(RowOptions());
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", {{"step", 4}}).ok());
  EXPECT_EQ(WriteSnapshot(*store, dir_ + "/snap", {{"step", 5}}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ((*ReadSnapshotMeta(dir_ + "/snap"))["step"], 4);
}

TEST_F(RowSnapshotTest, ScanErrorStopsTheScan) {
  auto store = NewMemoryRowStore(RowOptions());
  Fill(*store);
  ASSERT_TRUE(WriteSnapshot(*store, dir_ + "/snap", {}).ok());
  int visits = 0;
  Status st = ScanSnapshot(dir_ + "/snap", 0, 1 << 20, [&](std::span<const int64_t>, const float*, int) {
    ++visits;
    return Status::Cancelled("enough");
  });
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(visits, 1);
}

}  // namespace
}  // namespace tessera
