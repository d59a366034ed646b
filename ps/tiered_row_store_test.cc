// The tiered store's own promises: the budget, write-back of dirty rows only,
// its counters, its eviction policies, agreement with a memory store under a
// workload ten times its budget, and full-disk failures. The RowStore
// contract runs in row_store_test.cc.
#include "ps/tiered_row_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <thread>

#include "ps/rocks_fault_injection.h"
#include "ps/row_store_stats.h"

namespace tessera {
namespace {

constexpr int kWidth = 6;  // 4 embedding columns + 2 state floats

void TestInit(int64_t id, float* row) {
  for (int i = 0; i < kWidth; ++i) row[i] = static_cast<float>(id % 1000) * 0.5f + i;
}

RowStoreOptions Rows() {
  RowStoreOptions o;
  o.row_width = kWidth;
  o.gather_cols = 4;
  o.init = TestInit;
  return o;
}

std::unique_ptr<RowStore> Open(const TieredRowStoreOptions& o) {
  auto s = OpenTieredRowStore(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}
RowStoreStats StatsOf(const RowStore& s) { return s.Stats(); }
Status FlushOf(RowStore& s) { return s.Flush(); }
TierStats Host(const RowStore& s) { return *StatsOf(s).tier("host"); }
Status ReadAll(RowStore& s, std::vector<int64_t> ids) {
  return s.Read(ids, [](const float* const*, int64_t) {});
}
Status AddTo(RowStore& s, std::vector<int64_t> ids, float delta) {
  return s.Update(ids, [delta](float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < kWidth; ++c) rows[i][c] += delta;
    }
  });
}
std::vector<float> FullRows(RowStore& s, std::span<const int64_t> ids) {
  std::vector<float> out;
  EXPECT_TRUE(s.Read(ids, [&](const float* const* rows, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), rows[i], rows[i] + kWidth);
  }).ok());
  return out;
}

class TieredRowStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tiered_row_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TieredRowStoreOptions Options(int64_t budget_rows, EvictionPolicy policy = EvictionPolicy::kLru) const {
    TieredRowStoreOptions o;
    o.rows = Rows();
    o.db.path = dir_ + "/db";
    o.host_bytes = budget_rows * HostTierBytesPerRow(kWidth);
    o.policy = policy;
    return o;
  }
  std::string dir_;
};

TEST_F(TieredRowStoreTest, BudgetHoldsAfterEveryBatch) {
  auto store = Open(Options(100));
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 300; ++step) {
    std::vector<int64_t> ids;
    for (int64_t id = rng() % 40; id < 1000; id += 1 + rng() % 40) ids.push_back(id);  // distinct, <= ~50
    ASSERT_TRUE((step % 2 ? AddTo(*store, ids, 1.0f) : ReadAll(*store, ids)).ok());
    const TierStats host = Host(*store);
    ASSERT_LE(host.bytes_resident, host.byte_budget) << "step " << step;
    ASSERT_LE(host.rows_resident, 100);
  }
  EXPECT_GT(Host(*store).evictions, 0);
}

TEST_F(TieredRowStoreTest, BatchBiggerThanTheBudgetRunsThenEvicts) {
  auto store = Open(Options(10));
  ASSERT_NE(store, nullptr);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 100; ++i) ids.push_back(i);
  ASSERT_TRUE(AddTo(*store, ids, 1.0f).ok());
  EXPECT_LE(Host(*store).rows_resident, 10);
  const std::vector<float> rows = FullRows(*store, ids);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(rows[i * kWidth + 5], static_cast<float>(i) * 0.5f + 5 + 1);
  EXPECT_LE(Host(*store).rows_resident, 10);
  EXPECT_EQ(store->size(), 100);
}

TEST_F(TieredRowStoreTest, OnlyDirtyRowsAreWrittenBack) {
  auto store = Open(Options(10));
  ASSERT_NE(store, nullptr);
  auto range = [](int64_t from) {
    std::vector<int64_t> ids;
    for (int64_t i = from; i < from + 10; ++i) ids.push_back(i);
    return ids;
  };
  ASSERT_TRUE(AddTo(*store, range(0), 1.0f).ok());  // 0..9 resident, dirty
  ASSERT_TRUE(ReadAll(*store, range(100)).ok());    // evicts 0..9: written back
  ASSERT_TRUE(FlushOf(*store).ok());                // (through the write-back buffer) into RocksDB
  RowStoreStats s = StatsOf(*store);
  EXPECT_EQ(s.rocksdb_rows_written, 10);
  EXPECT_EQ(s.tier("host")->writebacks, 10);
  EXPECT_EQ(s.tier("host")->evictions, 10);
  ASSERT_TRUE(ReadAll(*store, range(0)).ok());    // promoted from RocksDB; 100..109 dropped, never written
  ASSERT_TRUE(ReadAll(*store, range(200)).ok());  // 0..9 clean now: dropped, not rewritten
  ASSERT_TRUE(FlushOf(*store).ok());
  s = StatsOf(*store);
  EXPECT_EQ(s.rocksdb_rows_written, 10);
  EXPECT_EQ(s.tier("host")->evictions, 30);
  EXPECT_EQ(s.tier("rocksdb")->hits, 10);
  EXPECT_EQ(s.tier("rocksdb")->rows_resident, 10);
  EXPECT_EQ(store->size(), 20);  // 0..9 in RocksDB + 200..209 resident (only read)
  const std::vector<float> rows = FullRows(*store, range(0));
  EXPECT_EQ(rows[3 * kWidth], 3 * 0.5f + 1);
}

TEST_F(TieredRowStoreTest, CountsHitsAndMisses) {
  auto store = Open(Options(100));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(ReadAll(*store, {1, 2, 3}).ok());
  ASSERT_TRUE(AddTo(*store, {1, 2, 3}, 1.0f).ok());
  ASSERT_TRUE(ReadAll(*store, {3, 4}).ok());
  const RowStoreStats s = StatsOf(*store);
  EXPECT_EQ(s.tier("host")->hits, 4);
  EXPECT_EQ(s.tier("host")->misses, 4);
  EXPECT_EQ(s.tier("host")->rows_resident, 4);
  EXPECT_EQ(s.tier("host")->bytes_resident, 4 * HostTierBytesPerRow(kWidth));
  EXPECT_EQ(s.tier("rocksdb")->misses, 4);  // looked up, never written
  EXPECT_EQ(s.rocksdb_rows_read, 0);  // looked up, none found
  EXPECT_EQ(s.rocksdb_rows_written, 0);
  ASSERT_TRUE(FlushOf(*store).ok());
  EXPECT_EQ(StatsOf(*store).rocksdb_rows_written, 3);  // the dirty ones
  EXPECT_EQ(StatsOf(*store).rocksdb_bytes_written, 3 * (8 + 4 * kWidth));
}

// Budget 4. A is read five times, then B, C, D once each; E needs room. LRU
// evicts A (touched longest ago), LFU evicts B (fewest touches, oldest among
// equals); with fast ageing A's old count has faded and LFU evicts A too.
bool AIsResidentAfterCraftedSequence(const TieredRowStoreOptions& o) {
  auto store = Open(o);
  const int64_t A = 1, B = 2, C = 3, D = 4, E = 5;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(ReadAll(*store, {A}).ok());
  for (int64_t id : {B, C, D}) EXPECT_TRUE(ReadAll(*store, {id}).ok());
  EXPECT_TRUE(ReadAll(*store, {E}).ok());
  EXPECT_EQ(Host(*store).evictions, 1);
  const int64_t hits = Host(*store).hits;
  EXPECT_TRUE(ReadAll(*store, {A}).ok());
  return Host(*store).hits == hits + 1;
}

TEST_F(TieredRowStoreTest, LruAndLfuPickDifferentVictims) {
  EXPECT_FALSE(AIsResidentAfterCraftedSequence(Options(4, EvictionPolicy::kLru)));
  std::filesystem::remove_all(dir_ + "/db");
  EXPECT_TRUE(AIsResidentAfterCraftedSequence(Options(4, EvictionPolicy::kLfuAging)));
  std::filesystem::remove_all(dir_ + "/db");
  TieredRowStoreOptions fading = Options(4, EvictionPolicy::kLfuAging);
  fading.lfu_halving_accesses = 2;
  EXPECT_FALSE(AIsResidentAfterCraftedSequence(fading));
}

// By default counts halve after sixteen budgets' worth of touches: a row
// touched twice outranks 12 budgets' worth of rows touched once since (with
// the period at four budgets, its count would have halved to nothing and it
// would have gone first).
TEST_F(TieredRowStoreTest, DefaultAgeingRemembersARowAcrossTwelveBudgetsOfTouches) {
  constexpr int64_t kBudget = 1024;  // the smallest budget the default period scales with
  auto store = Open(Options(kBudget, EvictionPolicy::kLfuAging));
  ASSERT_NE(store, nullptr);
  const int64_t A = 0;
  ASSERT_TRUE(ReadAll(*store, {A}).ok());
  ASSERT_TRUE(ReadAll(*store, {A}).ok());
  for (int64_t first = 1; first < 1 + 12 * kBudget; first += 8) {
    ASSERT_TRUE(ReadAll(*store, {first, first + 1, first + 2, first + 3, first + 4, first + 5, first + 6, first + 7})
                    .ok());
  }
  ASSERT_GT(Host(*store).evictions, 10 * kBudget);
  const int64_t misses = Host(*store).misses;
  ASSERT_TRUE(ReadAll(*store, {A}).ok());
  EXPECT_EQ(Host(*store).misses, misses) << "the twice-touched row was evicted";
}

// An eviction scan picks its victims and keeps the next coldest rows for the
// next passes; a kept row touched in between is passed over, not evicted.
TEST_F(TieredRowStoreTest, RowsKeptForTheNextEvictionAreSparedOnceTouched) {
  auto store = Open(Options(40, EvictionPolicy::kLru));  // eviction slack: 1 row
  ASSERT_NE(store, nullptr);
  for (int64_t id = 0; id < 40; ++id) ASSERT_TRUE(ReadAll(*store, {id}).ok());
  ASSERT_TRUE(ReadAll(*store, {40}).ok());  // a scan: evicts 0 and 1, keeps 2..7 in that order
  ASSERT_EQ(Host(*store).evictions, 2);
  ASSERT_TRUE(ReadAll(*store, {2}).ok());   // 2 touched since
  ASSERT_TRUE(ReadAll(*store, {41}).ok());  // fits
  ASSERT_TRUE(ReadAll(*store, {42}).ok());  // evicts 3 and 4 from what was kept, not 2
  ASSERT_EQ(Host(*store).evictions, 4);
  auto resident = [&](int64_t id) {
    const int64_t misses = Host(*store).misses;
    EXPECT_TRUE(ReadAll(*store, {id}).ok());
    return Host(*store).misses == misses;
  };
  EXPECT_TRUE(resident(2));
  EXPECT_TRUE(resident(5));
  EXPECT_FALSE(resident(4));
}

// Ten times more rows than the budget, random reads, updates and puts: every
// value read equals what a memory store gives for the same operations.
void MatchesMemoryStore(const TieredRowStoreOptions& o) {
  auto tiered = Open(o);
  ASSERT_NE(tiered, nullptr);
  auto memory = NewMemoryRowStore(Rows());
  std::mt19937_64 rng(11);
  constexpr int64_t kRows = 1000;
  for (int step = 0; step < 1500; ++step) {
    std::vector<int64_t> ids;
    const int64_t stride = 1 + static_cast<int64_t>(rng() % 60);
    for (int64_t id = static_cast<int64_t>(rng() % stride); id < kRows; id += stride) ids.push_back(id);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      ASSERT_EQ(FullRows(*tiered, ids), FullRows(*memory, ids)) << step;
    } else if (op < 9) {
      const float lr = 0.01f * static_cast<float>(rng() % 100);
      auto sgd = [lr](float* const* rows, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          rows[i][4] += rows[i][0] * rows[i][0];  // state moves with the row
          for (int c = 0; c < 4; ++c) rows[i][c] -= lr * (rows[i][c] - rows[i][5]);
        }
      };
      ASSERT_TRUE(tiered->Update(ids, sgd).ok());
      ASSERT_TRUE(memory->Update(ids, sgd).ok());
    } else {
      std::vector<float> rows(ids.size() * kWidth);
      for (float& v : rows) v = static_cast<float>(rng() % 1000);
      ASSERT_TRUE(tiered->Put(ids, rows.data()).ok());
      ASSERT_TRUE(memory->Put(ids, rows.data()).ok());
    }
    ASSERT_LE(Host(*tiered).rows_resident, kRows / 10);
  }
  std::vector<int64_t> all;
  for (int64_t id = 0; id < kRows; ++id) all.push_back(id);
  EXPECT_EQ(FullRows(*tiered, all), FullRows(*memory, all));
  EXPECT_GT(Host(*tiered).writebacks, 0);
}

TEST_F(TieredRowStoreTest, TenTimesTheBudgetMatchesMemoryStoreLru) {
  MatchesMemoryStore(Options(100, EvictionPolicy::kLru));
}

TEST_F(TieredRowStoreTest, TenTimesTheBudgetMatchesMemoryStoreLfuAging) {
  TieredRowStoreOptions o = Options(100, EvictionPolicy::kLfuAging);
  o.lfu_halving_accesses = 500;
  MatchesMemoryStore(o);
}

// The ids of the shard's range known: rows never written are not looked up
// below, and the answers are still those of a memory store.
TEST_F(TieredRowStoreTest, TenTimesTheBudgetMatchesMemoryStoreWithTheIdRangeKnown) {
  TieredRowStoreOptions o = Options(100, EvictionPolicy::kLfuAging);
  o.rows.id_begin = 0;
  o.rows.id_end = 1000;
  MatchesMemoryStore(o);
}

// Where the shard's id range is known (and its byte per id fits), a row
// evicted and read again starts from the count it had, not from zero. Under
// Zipf ids the host tier then keeps more of the rows just outside the hot
// set, which otherwise rank with the rows seen once. The values are those of
// a memory store either way.
TEST_F(TieredRowStoreTest, CountsRememberedAcrossEvictionsKeepMoreOfTheHotRows) {
  constexpr int64_t kRows = 1000;
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t i = 0; i < kRows; ++i) cdf[i] = sum += std::pow(static_cast<double>(i + 1), -1.05);
  for (double& c : cdf) c /= sum;
  auto run = [&](bool range_known, const std::string& name) {
    TieredRowStoreOptions o = Options(300, EvictionPolicy::kLfuAging);
    o.db.path = dir_ + "/" + name;
    if (range_known) o.rows.id_end = kRows;  // 1,125 bytes of bits and counts: within 300 rows' 1,275
    auto store = Open(o);
    auto memory = NewMemoryRowStore(Rows());
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0, 1);
    int64_t hits = 0, misses = 0;
    for (int batch = 0; batch < 3000; ++batch) {
      std::vector<int64_t> ids;
      for (int k = 0; k < 16; ++k) {
        const int64_t id = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
        if (id < kRows && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      if (batch == 1000) hits = -Host(*store).hits, misses = -Host(*store).misses;
      EXPECT_TRUE(AddTo(*store, ids, 1.0f).ok());
      EXPECT_TRUE(AddTo(*memory, ids, 1.0f).ok());
    }
    hits += Host(*store).hits;
    misses += Host(*store).misses;
    std::vector<int64_t> all(kRows);
    for (int64_t id = 0; id < kRows; ++id) all[id] = id;
    EXPECT_EQ(FullRows(*store, all), FullRows(*memory, all));
    return static_cast<double>(hits) / static_cast<double>(hits + misses);
  };
  const double forgotten = run(false, "forgotten");
  const double remembered = run(true, "remembered");
  std::cout << "[ info     ] host hit rate, counts from zero " << forgotten << ", remembered " << remembered << "\n";
  EXPECT_LT(1 - remembered, 0.97 * (1 - forgotten)) << "not 3% fewer misses";
}

// Rows start with column c at c plus a base (0 when put first, else their
// initial value); writers add 1 to every column of random batches of their
// own rows, readers check each row they see is whole. Far more rows than the
// budget, so batches evict each other's rows.
void ConcurrentWritersAndReaders(TieredRowStoreOptions o, bool put_first) {
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  constexpr int64_t kRows = 512;
  std::vector<int64_t> all;
  for (int64_t i = 0; i < kRows; ++i) all.push_back(i);
  std::vector<float> base(kRows, 0.0f);
  if (put_first) {
    std::vector<float> rows(kRows * kWidth);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % kWidth);
    ASSERT_TRUE(store->Put(all, rows.data()).ok());
  } else {
    for (int64_t id = 0; id < kRows; ++id) base[id] = static_cast<float>(id % 1000) * 0.5f;  // TestInit's
  }
  std::vector<std::vector<int>> adds(2, std::vector<int>(kRows, 0));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      for (int round = 0; round < 300; ++round) {
        std::vector<int64_t> ids;
        for (int64_t id = w + 2 * static_cast<int64_t>(rng() % 8); id < kRows; id += 2 * (1 + rng() % 16)) ids.push_back(id);
        if (!AddTo(*store, ids, 1.0f).ok()) ++errors;
        for (int64_t id : ids) ++adds[w][id];
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(200 + r);
      while (!done) {
        std::vector<int64_t> ids;
        for (int64_t id = static_cast<int64_t>(rng() % 7); id < kRows; id += 1 + rng() % 20) ids.push_back(id);
        Status st = store->Read(ids, [&](const float* const* rows, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            for (int c = 1; c < kWidth; ++c) torn += rows[i][c] - rows[i][0] != static_cast<float>(c);
          }
        });
        if (!st.ok()) ++errors;
      }
    });
  }
  threads[0].join();
  threads[1].join();
  done = true;
  threads[2].join();
  threads[3].join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  const std::vector<float> rows = FullRows(*store, all);
  for (int64_t id = 0; id < kRows; ++id) {
    ASSERT_EQ(rows[id * kWidth], base[id] + static_cast<float>(adds[id % 2][id])) << id;
  }
  EXPECT_GT(Host(*store).evictions, 0);
}

TEST_F(TieredRowStoreTest, ConcurrentWritersAndReadersUnderEviction) {
  ConcurrentWritersAndReaders(Options(32), /*put_first=*/true);
}

// New rows come up while others are written back: the bits of the ids below
// must never say "absent" for a row that is there.
TEST_F(TieredRowStoreTest, ConcurrentWritersAndReadersOfNewRowsWithTheIdRangeKnown) {
  TieredRowStoreOptions o = Options(32);
  o.rows.id_begin = 0;
  o.rows.id_end = 512;
  ConcurrentWritersAndReaders(o, /*put_first=*/false);
}

TEST_F(TieredRowStoreTest, RowsNeverWrittenAreNotLookedUpBelow) {
  TieredRowStoreOptions o = Options(10);
  o.rows.id_begin = 0;
  o.rows.id_end = 200;  // its bits within a sixteenth of the budget
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  auto range = [](int64_t from) {
    std::vector<int64_t> ids;
    for (int64_t i = from; i < from + 10; ++i) ids.push_back(i);
    return ids;
  };
  ASSERT_TRUE(AddTo(*store, range(0), 1.0f).ok());  // new rows: initialized, nothing asked below
  ASSERT_TRUE(ReadAll(*store, range(100)).ok());    // the same; evicts 0..9, written back
  RowStoreStats s = StatsOf(*store);
  EXPECT_EQ(s.tier("rocksdb")->hits + s.tier("rocksdb")->misses, 0);
  ASSERT_TRUE(ReadAll(*store, range(100)).ok());  // resident
  ASSERT_TRUE(ReadAll(*store, range(0)).ok());    // below now: found there; 100..109 dropped, never written
  ASSERT_TRUE(ReadAll(*store, range(100)).ok());  // still new below: not asked
  s = StatsOf(*store);
  EXPECT_EQ(s.tier("rocksdb")->hits, 10);
  EXPECT_EQ(s.tier("rocksdb")->misses, 0);
  ASSERT_TRUE(ReadAll(*store, {5000, 5001}).ok());  // outside the range: asked
  EXPECT_EQ(StatsOf(*store).tier("rocksdb")->misses, 2);
  const std::vector<float> rows = FullRows(*store, range(0));
  EXPECT_EQ(rows[3 * kWidth], 3 * 0.5f + 1);
}

// A store opened over rows it has not seen asks below for every id once; the
// ids found absent are not asked again, those found are.
TEST_F(TieredRowStoreTest, ReopenedStoreAsksBelowOnceForEachAbsentId) {
  TieredRowStoreOptions o = Options(10);
  o.rows.id_begin = 0;
  o.rows.id_end = 200;  // its bits within a sixteenth of the budget
  std::vector<int64_t> written, absent;
  for (int64_t i = 0; i < 10; ++i) {
    written.push_back(i);
    absent.push_back(10 + i);
  }
  {
    auto store = Open(o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AddTo(*store, written, 2.0f).ok());
    ASSERT_TRUE(FlushOf(*store).ok());
  }
  o.db.mode = RowDbOpenMode::kOpenExisting;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(ReadAll(*store, absent).ok());
  ASSERT_TRUE(ReadAll(*store, written).ok());  // evicts the absent ones (clean: dropped)
  RowStoreStats s = StatsOf(*store);
  EXPECT_EQ(s.tier("rocksdb")->misses, 10);
  EXPECT_EQ(s.tier("rocksdb")->hits, 10);
  ASSERT_TRUE(ReadAll(*store, absent).ok());   // known absent now
  ASSERT_TRUE(ReadAll(*store, written).ok());  // still below
  s = StatsOf(*store);
  EXPECT_EQ(s.tier("rocksdb")->misses, 10);
  EXPECT_EQ(s.tier("rocksdb")->hits, 20);
  EXPECT_EQ(FullRows(*store, written)[4 * kWidth + 1], 4 * 0.5f + 1 + 2);
}

// A full disk: a batch whose victims cannot be written back fails (unbuffered:
// at once; with a write-back buffer: once the buffer's write has failed and
// the buffer is needed again), the rows stay served, and once space is back
// nothing acknowledged is lost and the failed batch did not apply.
void FullDiskFailsTheBatchAndKeepsDirtyRows(TieredRowStoreOptions o) {
  FaultFs fault;
  o.db.env = fault.env();
  o.db.write_ahead_log = true;  // so write-backs fail at once, not at a later memtable flush
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  fault.SetBytesLeft(2000);
  int64_t ok_batches = 0;
  Status failed;
  for (int64_t b = 0; b < 100 && failed.ok(); ++b) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 8; ++i) ids.push_back(b * 8 + i);
    failed = AddTo(*store, ids, static_cast<float>(b + 1));
    if (failed.ok()) ok_batches = b + 1;
  }
  ASSERT_FALSE(failed.ok()) << "the injected fault never fired";
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed;
  EXPECT_NE(failed.message().find(o.db.path), std::string::npos) << failed;
  EXPECT_EQ(FlushOf(*store).code(), StatusCode::kResourceExhausted);
  // Resident rows are still served while the disk is full.
  std::vector<int64_t> last;
  for (int64_t i = 0; i < 8; ++i) last.push_back((ok_batches - 1) * 8 + i);
  EXPECT_EQ(FullRows(*store, last)[0], static_cast<float>(last[0] % 1000) * 0.5f + static_cast<float>(ok_batches));

  // Space comes back: nothing acknowledged was lost, the failed batch did not apply.
  fault.SetBytesLeft(std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(FlushOf(*store).ok());
  store.reset();
  o.db.mode = RowDbOpenMode::kOpenExisting;
  store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->size(), ok_batches * 8);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < (ok_batches + 1) * 8; ++i) ids.push_back(i);
  const std::vector<float> rows = FullRows(*store, ids);
  for (int64_t id : ids) {
    const float added = id / 8 < ok_batches ? static_cast<float>(id / 8 + 1) : 0.0f;
    ASSERT_EQ(rows[id * kWidth + 1], static_cast<float>(id % 1000) * 0.5f + 1 + added) << id;
  }
}

TEST_F(TieredRowStoreTest, FullDiskFailsTheBatchAndKeepsDirtyRowsInMemory) {
  TieredRowStoreOptions o = Options(16);
  o.write_back_buffer_bytes = 0;
  FullDiskFailsTheBatchAndKeepsDirtyRows(o);
}

TEST_F(TieredRowStoreTest, FullDiskFailsTheBatchAndKeepsBufferedRowsInMemory) {
  TieredRowStoreOptions o = Options(16);
  o.write_back_buffer_bytes = 24 * (kWidth * sizeof(float) + sizeof(int64_t));  // 24 rows
  FullDiskFailsTheBatchAndKeepsDirtyRows(o);
}

}  // namespace
}  // namespace tessera
