// The RowStore contract, run against every implementation.
#include "ps/row_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <thread>

namespace tessera {
namespace {

constexpr int kWidth = 5;  // 3 embedding columns + 2 state floats
constexpr int kCols = 3;

void TestInit(int64_t id, float* row) {
  for (int i = 0; i < kWidth; ++i) row[i] = static_cast<float>(id * 10 + i);
}

using Factory = std::function<std::unique_ptr<RowStore>(const RowStoreOptions&)>;

class RowStoreContract : public ::testing::TestWithParam<std::pair<std::string, Factory>> {
 protected:
  void SetUp() override {
    RowStoreOptions o;
    o.row_width = kWidth;
    o.gather_cols = kCols;
    o.init = TestInit;
    store_ = GetParam().second(o);
  }
  std::unique_ptr<RowStore> store_;
};

TEST_P(RowStoreContract, GatherOfUnwrittenRowsIsTheirInitialValue) {
  std::vector<int64_t> ids = {7, 0, 123456789012LL};
  std::vector<float> out(ids.size() * kCols, -1);
  ASSERT_TRUE(store_->Gather(ids, out.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int c = 0; c < kCols; ++c) EXPECT_EQ(out[i * kCols + c], static_cast<float>(ids[i] * 10 + c));
  }
  // Reading again gives the same values, whether or not the first read kept them.
  std::vector<float> again(ids.size() * kCols, -1);
  ASSERT_TRUE(store_->Gather(ids, again.data()).ok());
  EXPECT_EQ(again, out);
}

TEST_P(RowStoreContract, UpdateMaterializesAndPersists) {
  std::vector<int64_t> ids = {3, 4};
  ASSERT_TRUE(store_->Update(ids, [](float* const* rows, int64_t n) {
    ASSERT_EQ(n, 2);
    EXPECT_EQ(rows[0][4], 34.0f);  // state starts from the initializer
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < kWidth; ++c) rows[i][c] += 1000;
    }
  }).ok());
  EXPECT_EQ(store_->size(), 2);
  std::vector<float> out(2 * kCols);
  ASSERT_TRUE(store_->Gather(ids, out.data()).ok());
  EXPECT_EQ(out[0], 1030.0f);
  EXPECT_EQ(out[kCols + 2], 1042.0f);
}

TEST_P(RowStoreContract, PutOverwritesAndForEachVisitsEveryRow) {
  std::vector<int64_t> ids = {1, 2, 1000000};
  std::vector<float> rows(ids.size() * kWidth);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  ASSERT_TRUE(store_->Put(ids, rows.data()).ok());
  std::map<int64_t, std::vector<float>> seen;
  ASSERT_TRUE(store_->ForEach([&](int64_t id, const float* row) {
    seen[id] = std::vector<float>(row, row + kWidth);
    return Status::OK();
  }).ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1000000][4], 14.0f);
  // ForEach stops at the first error and returns it.
  int visits = 0;
  Status st = store_->ForEach([&](int64_t, const float*) {
    ++visits;
    return Status::DataLoss("stop");
  });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(visits, 1);
}

TEST_P(RowStoreContract, ManyRowsSurviveGrowth) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 100000; ++i) ids.push_back(i * 7919);
  ASSERT_TRUE(store_->Update(ids, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][0] = static_cast<float>(-i);
  }).ok());
  EXPECT_EQ(store_->size(), 100000);
  std::vector<float> out(ids.size() * kCols);
  ASSERT_TRUE(store_->Gather(ids, out.data()).ok());
  for (int64_t i = 0; i < 100000; i += 997) EXPECT_EQ(out[i * kCols], static_cast<float>(-i));
}

TEST_P(RowStoreContract, ConcurrentReadersAndAWriterSeeWholeRows) {
  // The writer keeps every row's columns equal to each other; a reader must
  // never see a row half-updated.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 256; ++i) ids.push_back(i);
  ASSERT_TRUE(store_->Update(ids, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < kWidth; ++c) rows[i][c] = 0;
    }
  }).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      std::vector<float> out(ids.size() * kCols);
      while (!done) {
        ASSERT_TRUE(store_->Gather(ids, out.data()).ok());
        for (size_t i = 0; i < ids.size(); ++i) {
          if (out[i * kCols] != out[i * kCols + 1] || out[i * kCols] != out[i * kCols + 2]) ++torn;
        }
      }
    });
  }
  for (int round = 1; round <= 200; ++round) {
    ASSERT_TRUE(store_->Update(ids, [round](float* const* rows, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        for (int c = 0; c < kWidth; ++c) rows[i][c] = static_cast<float>(round);
      }
    }).ok());
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Stores, RowStoreContract,
                         ::testing::Values(std::make_pair(std::string("memory"), Factory(NewMemoryRowStore))),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace tessera
