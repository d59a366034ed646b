// Snapshots: round trips from every kind of store, range scans (a restore onto
// a different sharding reads ranges), and incomplete snapshots refused.
#include "ps/row_snapshot.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
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

// Rows of the snapshot at dir with id in [begin, end), checking id order.
Rows Scan(const std::string& dir, int64_t begin = 0, int64_t end = std::numeric_limits<int64_t>::max()) {
  Rows rows;
  int64_t last = -1;
  Status st = ScanSnapshot(dir, begin, end, [&](int64_t id, const float* row, int width) {
    EXPECT_EQ(width, kWidth);
    EXPECT_GT(id, last);
    last = id;
    rows[id] = std::vector<float>(row, row + width);
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st;
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

TEST_F(RowSnapshotTest, IncompleteSnapshotIsRefused) {
  auto store = NewMemoryRowStore(RowOptions());
  Fill(*store);
  const std::string snap = dir_ + "/snap";
  ASSERT_TRUE(WriteSnapshot(*store, snap, {{"step", 3}}).ok());
  std::filesystem::remove(snap + "/meta.json");
  Status st = ScanSnapshot(snap, 0, 100, [](int64_t, const float*, int) { return Status::OK(); });
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
  Status st = ScanSnapshot(dir_ + "/snap", 0, 1 << 20, [&](int64_t, const float*, int) {
    ++visits;
    return Status::Cancelled("enough");
  });
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(visits, 1);
}

}  // namespace
}  // namespace tessera
