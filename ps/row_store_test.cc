// The RowStore contract, run against every implementation.
#include "ps/row_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "ps/device_row_store.h"
#include "ps/rocks_row_store.h"
#include "common/sharding_plan.h"
#include "ps/slot_table.h"
#include "ps/store_factory.h"
#include "ps/tiered_row_store.h"

namespace tessera {
namespace {

constexpr int kWidth = 5;  // 3 embedding columns + 2 state floats
constexpr int kCols = 3;

void TestInit(int64_t id, float* row) {
  for (int i = 0; i < kWidth; ++i) row[i] = static_cast<float>(id * 10 + i);
}

// Opens a store keeping its files (if any) under `dir`; opening a persistent
// kind again on the same dir finds the rows of the last one.
using Factory = std::function<std::unique_ptr<RowStore>(const RowStoreOptions&, const std::string& dir)>;

struct StoreKind {
  std::string name;
  Factory open;
  bool persistent = false;
};

std::unique_ptr<RowStore> OrNull(StatusOr<std::unique_ptr<RowStore>> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::unique_ptr<RowStore> OpenRocks(const RowStoreOptions& rows, const std::string& dir) {
  RocksRowStoreOptions o;
  o.rows = rows;
  o.db.path = dir + "/db";
  return OrNull(OpenRocksRowStore(o));
}

// Room for 64 rows: the tests below touch up to 100000, so rows are evicted
// and promoted again all the time.
std::unique_ptr<RowStore> OpenTiered(const RowStoreOptions& rows, const std::string& dir, EvictionPolicy policy) {
  TieredRowStoreOptions o;
  o.rows = rows;
  o.db.path = dir + "/db";
  o.host_bytes = 64 * HostTierBytesPerRow(rows.row_width);
  o.policy = policy;
  return OrNull(OpenTieredRowStore(o));
}

// The GPU tier's logic with its 48 slots in host memory, over `lower`.
std::unique_ptr<RowStore> OverSlots(const RowStoreOptions& rows, std::unique_ptr<RowStore> lower) {
  if (lower == nullptr) return nullptr;
  auto s = DeviceRowStore::Create(rows, NewHostSlotTable(48, rows.row_width), std::move(lower), 0,
                                  std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::unique_ptr<RowStore>(std::move(s).value()) : nullptr;
}

Status FlushStore(RowStore& store) { return store.Flush(); }

class RowStoreContract : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "row_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    Open();
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Open() {
    RowStoreOptions o;
    o.row_width = kWidth;
    o.gather_cols = kCols;
    o.init = TestInit;
    store_.reset();  // a persistent store must close before it is opened again
    store_ = GetParam().open(o, dir_);
  }
  // The full rows of ids, read through Read.
  std::vector<float> FullRows(std::span<const int64_t> ids) {
    std::vector<float> out;
    EXPECT_TRUE(store_->Read(ids, [&](const float* const* rows, int64_t n) {
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), rows[i], rows[i] + kWidth);
    }).ok());
    return out;
  }
  std::string dir_;
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

TEST_P(RowStoreContract, GatherExistingCreatesNoRowAndSeesTheNewestValues) {
  // Rows 0..199 written (more than a tier's room: some are only below),
  // row 1 updated again after; then an evaluation's read of written and
  // never-written rows.
  std::vector<int64_t> written(200);
  for (int64_t i = 0; i < 200; ++i) written[i] = i;
  ASSERT_TRUE(store_->Update(written, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][0] = -static_cast<float>(i);
  }).ok());
  ASSERT_TRUE(store_->Update(std::vector<int64_t>{1}, [](float* const* rows, int64_t) { rows[0][1] = 77; }).ok());
  const int64_t size = store_->size();
  ASSERT_EQ(size, 200);
  const std::vector<int64_t> ids = {1, 5000, 199, 123456789012LL, 0, 5000};
  std::vector<float> out(ids.size() * kCols, -1);
  ASSERT_TRUE(store_->GatherExisting(ids, out.data()).ok());
  EXPECT_EQ(store_->size(), size);  // nothing created
  EXPECT_EQ(out[0 * kCols + 0], -1.0f);
  EXPECT_EQ(out[0 * kCols + 1], 77.0f);
  EXPECT_EQ(out[2 * kCols + 0], -199.0f);
  EXPECT_EQ(out[4 * kCols + 0], 0.0f);
  for (size_t i : {size_t{1}, size_t{3}, size_t{5}}) {  // never written: initial values
    for (int c = 0; c < kCols; ++c) EXPECT_EQ(out[i * kCols + c], static_cast<float>(ids[i] * 10 + c)) << ids[i];
  }
  // And none appears later either (not in memory, not below).
  int64_t visited = 0;
  ASSERT_TRUE(store_->ForEach([&](int64_t id, const float*) {
    EXPECT_LT(id, 200);
    ++visited;
    return Status::OK();
  }).ok());
  EXPECT_EQ(visited, 200);
  // What Gather reads of the written rows is the same.
  std::vector<float> gathered(3 * kCols);
  ASSERT_TRUE(store_->Gather(std::vector<int64_t>{1, 199, 0}, gathered.data()).ok());
  EXPECT_EQ(std::vector<float>(gathered.begin(), gathered.begin() + kCols),
            std::vector<float>(out.begin(), out.begin() + kCols));
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

// Enough rows that the memory store's slabs reach 2 MiB (huge pages, where
// asked for).
TEST_P(RowStoreContract, ManyRowsSurviveGrowth) {
  constexpr int64_t kRows = 140000;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kRows; ++i) ids.push_back(i * 7919);
  ASSERT_TRUE(store_->Update(ids, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][0] = static_cast<float>(-i);
  }).ok());
  EXPECT_EQ(store_->size(), kRows);
  std::vector<float> out(ids.size() * kCols);
  ASSERT_TRUE(store_->Gather(ids, out.data()).ok());
  for (int64_t i = 0; i < kRows; i += 997) EXPECT_EQ(out[i * kCols], static_cast<float>(-i));
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

// Reads that meet new rows, several at once, with repeats within a read and
// rows stored already: every row is created once, from its initializer, and
// every read sees each of its ids' rows whole.
TEST_P(RowStoreContract, ConcurrentReadsCreateEachNewRowOnce) {
  std::vector<int64_t> stored;
  for (int64_t i = 0; i < 300; i += 3) stored.push_back(i);
  ASSERT_TRUE(store_->Update(stored, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < kWidth; ++c) rows[i][c] += 0.5f;
    }
  }).ok());
  auto expected = [](int64_t id, int c) { return static_cast<float>(id * 10 + c) + (id % 3 == 0 ? 0.5f : 0.0f); };
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        // Overlapping windows of new and stored ids, each twice.
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < 40; ++i) ids.push_back((t * 37 + round * 13 + i) % 300);
        for (int64_t i = 0; i < 40; i += 2) ids.push_back(ids[i]);
        const Status st = store_->Read(ids, [&](const float* const* rows, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            for (int c = 0; c < kWidth; ++c) {
              if (rows[i][c] != expected(ids[i], c)) ++wrong;
            }
          }
        });
        if (!st.ok()) ++wrong;
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  std::vector<int64_t> all(300);
  for (int64_t i = 0; i < 300; ++i) all[i] = i;
  const std::vector<float> rows = FullRows(all);
  ASSERT_EQ(rows.size(), all.size() * kWidth);
  for (int64_t i = 0; i < 300; ++i) EXPECT_EQ(rows[i * kWidth + 1], expected(i, 1)) << "row " << i;
}

TEST_P(RowStoreContract, ValuesSurviveEvictionAndPromotion) {
  // Far more rows than a small tier holds, written in batches, read back in
  // another order: each row comes back from wherever it went.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2000; ++i) ids.push_back(i * 31 + 5);
  for (size_t b = 0; b < ids.size(); b += 100) {
    std::span<const int64_t> batch(ids.data() + b, 100);
    ASSERT_TRUE(store_->Update(batch, [&](float* const* rows, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        for (int c = 0; c < kWidth; ++c) rows[i][c] = static_cast<float>(batch[i] * 100 + c);
      }
    }).ok());
  }
  std::mt19937_64 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (size_t b = 0; b < ids.size(); b += 250) {
    std::span<const int64_t> batch(ids.data() + b, 250);
    std::vector<float> rows = FullRows(batch);
    ASSERT_EQ(rows.size(), batch.size() * kWidth);
    for (size_t i = 0; i < batch.size(); ++i) {
      for (int c = 0; c < kWidth; ++c) ASSERT_EQ(rows[i * kWidth + c], static_cast<float>(batch[i] * 100 + c)) << batch[i];
    }
  }
  EXPECT_EQ(store_->size(), 2000);
}

TEST_P(RowStoreContract, UpdatesOfEvictedRowsStartFromTheirLatestValue) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 500; ++i) ids.push_back(i);
  for (int round = 0; round < 3; ++round) {
    for (size_t b = 0; b < ids.size(); b += 50) {
      ASSERT_TRUE(store_->Update(std::span<const int64_t>(ids.data() + b, 50), [](float* const* rows, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          for (int c = 0; c < kWidth; ++c) rows[i][c] += 1;  // embedding and state alike
        }
      }).ok());
    }
  }
  std::vector<float> rows = FullRows(ids);
  for (int64_t id : ids) {
    for (int c = 0; c < kWidth; ++c) ASSERT_EQ(rows[id * kWidth + c], static_cast<float>(id * 10 + c + 3)) << id;
  }
}

TEST_P(RowStoreContract, FlushKeepsValues) {
  std::vector<int64_t> ids = {9, 99, 999};
  std::vector<float> rows(ids.size() * kWidth, 2.5f);
  ASSERT_TRUE(store_->Put(ids, rows.data()).ok());
  ASSERT_TRUE(FlushStore(*store_).ok());
  EXPECT_EQ(FullRows(ids), rows);
  ASSERT_TRUE(FlushStore(*store_).ok());  // nothing dirty: still fine
  EXPECT_EQ(FullRows(ids), rows);
}

TEST_P(RowStoreContract, ReopenKeepsRows) {
  if (!GetParam().persistent) GTEST_SKIP() << "rows live in memory only";
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 300; ++i) ids.push_back(i * 3);
  ASSERT_TRUE(store_->Update(ids, [](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rows[i][kWidth - 1] = -static_cast<float>(i);
  }).ok());
  const std::vector<float> before = FullRows(ids);
  Open();  // closes without an explicit Flush: closing must not lose rows
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(store_->size(), 300);
  EXPECT_EQ(FullRows(ids), before);
  int64_t visited = 0;
  ASSERT_TRUE(store_->ForEach([&](int64_t, const float*) {
    ++visited;
    return Status::OK();
  }).ok());
  EXPECT_EQ(visited, 300);
}

INSTANTIATE_TEST_SUITE_P(
    Stores, RowStoreContract,
    ::testing::Values(
        StoreKind{"memory", [](const RowStoreOptions& o, const std::string&) { return NewMemoryRowStore(o); }, false},
        // Ids of [0, 100000) through the direct index, the tests' larger
        // ids through the hash map, side by side in one store.
        StoreKind{"memory_direct_index",
                  [](const RowStoreOptions& o, const std::string&) {
                    RowStoreOptions ranged = o;
                    ranged.id_begin = 0;
                    ranged.id_end = 100000;
                    return NewMemoryRowStore(ranged);
                  },
                  false},
        StoreKind{"memory_huge_pages",
                  [](const RowStoreOptions& o, const std::string&) {
                    RowStoreOptions huge = o;
                    huge.huge_pages = true;
                    return NewMemoryRowStore(huge);
                  },
                  false},
        StoreKind{"rocksdb", OpenRocks, true},
        StoreKind{"tiered_lru",
                  [](const RowStoreOptions& o, const std::string& d) { return OpenTiered(o, d, EvictionPolicy::kLru); },
                  true},
        StoreKind{"tiered_lfu_aging",
                  [](const RowStoreOptions& o, const std::string& d) {
                    return OpenTiered(o, d, EvictionPolicy::kLfuAging);
                  },
                  true},
        StoreKind{"gpu_tier_host_slots_over_memory",
                  [](const RowStoreOptions& o, const std::string&) { return OverSlots(o, NewMemoryRowStore(o)); },
                  false},
        StoreKind{"gpu_tier_host_slots_over_tiered",
                  [](const RowStoreOptions& o, const std::string& d) {
                    return OverSlots(o, OpenTiered(o, d, EvictionPolicy::kLfuAging));
                  },
                  true}),
    [](const auto& info) { return info.param.name; });

// The flags (VmFlags in /proc/self/smaps) of the mapping that holds p.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// --huge_pages reaches a server's memory-only shards: their rows, past the
// first 2 MiB slab, sit in memory marked for huge pages (MADV_HUGEPAGE, "hg");
// without it they do not.
TEST(MemoryStoreHugePages, TheServersFlagReachesTheRows) {
  const int width = 64;
  RowStoreOptions rows;
  rows.row_width = width;
  rows.gather_cols = width;
  rows.init = [](int64_t id, float* row) { std::fill(row, row + width, static_cast<float>(id)); };
  ShardSpec shard;
  shard.shard_id = 0;
  shard.num_rows = 100000;
  shard.num_cols = width;
  rows.id_end = shard.num_rows;
  std::vector<int64_t> ids(shard.num_rows);
  for (int64_t i = 0; i < shard.num_rows; ++i) ids[i] = i;
  for (bool huge : {false, true}) {
    SCOPED_TRACE(huge ? "--huge_pages" : "default");
    ShardStorageOptions storage;
    storage.huge_pages = huge;
    auto made = MakeRowStoreFactory(storage)(shard, rows);
    ASSERT_TRUE(made.ok()) << made.status();
    std::unique_ptr<RowStore> store = std::move(made).value();
    const float* last = nullptr;  // in the last, largest slab (100,000 rows of 256 bytes: past 2 MiB)
    ASSERT_TRUE(store->Read(ids, [&](const float* const* r, int64_t n) {
      last = r[n - 1];
      EXPECT_EQ(r[n - 1][0], static_cast<float>(n - 1));
    }).ok());
    const std::string flags = VmFlagsOf(last);
    ASSERT_FALSE(flags.empty()) << "no mapping holds the row";
    EXPECT_EQ(flags.find(" hg") != std::string::npos, huge) << flags;
  }
}

}  // namespace
}  // namespace tessera
