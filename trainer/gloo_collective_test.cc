// The Gloo collective with its ranks as threads of this process, meeting
// through one MemoryStore and talking TCP over 127.0.0.1 (as Gloo's own tests
// do): no master needed.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/memory_store.h"
#include "trainer/collective.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Runs fn(rank) for ranks [0, ranks) on a thread each; returns when all end.
void OnThreads(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

GlooCollectiveOptions Options(int rank, int world, const std::string& prefix, milliseconds timeout) {
  GlooCollectiveOptions o;
  o.rank = rank;
  o.world = world;
  o.prefix = prefix;
  o.timeout = timeout;
  return o;
}

// Opens ranks [0, present) of a world of `world`, together; each rank's
// result is in its slot.
std::vector<StatusOr<std::unique_ptr<Collective>>> OpenRanks(Store* store, int world, int present,
                                                             const std::string& prefix, milliseconds timeout) {
  std::vector<StatusOr<std::unique_ptr<Collective>>> out;
  for (int r = 0; r < present; ++r) out.emplace_back(Status::Internal("not opened"));
  OnThreads(present, [&](int r) { out[r] = NewGlooCollective(Options(r, world, prefix, timeout), store); });
  return out;
}

// Rank r's element i. Small integers: every sum is exact in float, in any
// order, so the expected sum is known exactly.
float IntValue(int r, size_t i, int round) { return static_cast<float>((i * 7 + r * 13 + round) % 1001) - 500.0f; }

TEST(GlooCollectiveTest, RanksAsThreadsSumOnEveryRankAndAgain) {
  constexpr int kWorld = 3;
  MemoryStore store;
  auto opened = OpenRanks(&store, kWorld, kWorld, "gloo/sum", milliseconds(30000));
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(opened[r].ok()) << "rank " << r << ": " << opened[r].status();
    EXPECT_EQ((*opened[r])->rank(), r);
    EXPECT_EQ((*opened[r])->world(), kWorld);
  }

  // Two rounds over the same collectives, each over sizes from empty to 4 MiB.
  const std::vector<size_t> sizes = {0, 1, 7, 1000, size_t{1} << 20};
  for (int round = 0; round < 2; ++round) {
    for (size_t n : sizes) {
      std::vector<std::vector<float>> data(kWorld, std::vector<float>(n));
      std::vector<Status> st(kWorld);
      for (int r = 0; r < kWorld; ++r) {
        for (size_t i = 0; i < n; ++i) data[r][i] = IntValue(r, i, round);
      }
      OnThreads(kWorld, [&](int r) { st[r] = (*opened[r])->AllReduceSum(data[r]); });
      for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ", " << n << " floats: " << st[r];
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < kWorld; ++r) want += IntValue(r, i, round);
        for (int r = 0; r < kWorld; ++r) {
          ASSERT_EQ(data[r][i], want) << "round " << round << ", " << n << " floats, rank " << r << ", element " << i;
        }
      }
    }
  }

  // Fractions: the rounding depends on the order of the sum, yet every rank
  // ends with the same bits (they must keep identical replicas).
  const size_t n = 100003;
  std::vector<std::vector<float>> data(kWorld, std::vector<float>(n));
  std::vector<Status> st(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = static_cast<float>(r + 1) / static_cast<float>(i + 3);
  }
  OnThreads(kWorld, [&](int r) { st[r] = (*opened[r])->AllReduceSum(data[r]); });
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  for (int r = 1; r < kWorld; ++r) ASSERT_EQ(data[r], data[0]) << "rank " << r << " differs from rank 0";
  for (size_t i = 0; i < n; i += 997) {
    const float want = 6.0f / static_cast<float>(i + 3);  // 1 + 2 + 3
    EXPECT_NEAR(data[0][i], want, 1e-6f * want) << "element " << i;
  }
}

TEST(GlooCollectiveTest, ARankThatNeverComesMakesTheOthersFailInTime) {
  constexpr int kWorld = 3;
  const milliseconds timeout(500);
  MemoryStore store;
  const auto start = Clock::now();
  auto opened = OpenRanks(&store, kWorld, kWorld - 1, "gloo/missing", timeout);  // rank 2 never comes
  const auto took = Clock::now() - start;
  for (int r = 0; r < kWorld - 1; ++r) {
    ASSERT_FALSE(opened[r].ok()) << "rank " << r;
    const Status& st = opened[r].status();
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("rendezvous"), std::string::npos) << st;
    // The store's error, naming the key of the rank that never came.
    EXPECT_NE(st.message().find("DEADLINE_EXCEEDED"), std::string::npos) << st;
    EXPECT_NE(st.message().find("gloo/missing/"), std::string::npos) << st;
  }
  EXPECT_LT(took, milliseconds(10000)) << "the rendezvous should end near its 500 ms timeout";
  std::cout << "[ info     ] rank 0: " << opened[0].status() << "\n";
}

TEST(GlooCollectiveTest, ARankThatStopsTakingPartMakesTheSumFailInTime) {
  constexpr int kWorld = 3;
  MemoryStore store;
  auto opened = OpenRanks(&store, kWorld, kWorld, "gloo/stops", milliseconds(1000));
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(opened[r].ok()) << "rank " << r << ": " << opened[r].status();

  // Rank 2 stays connected but never calls the allreduce.
  std::vector<std::vector<float>> data(kWorld - 1, std::vector<float>(1000, 1.0f));
  std::vector<Status> st(kWorld - 1);
  const auto start = Clock::now();
  OnThreads(kWorld - 1, [&](int r) { st[r] = (*opened[r])->AllReduceSum(data[r]); });
  const auto took = Clock::now() - start;
  for (int r = 0; r < kWorld - 1; ++r) {
    ASSERT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_EQ(st[r].code(), StatusCode::kUnavailable) << st[r];
  }
  EXPECT_LT(took, milliseconds(15000)) << "the allreduce should end near its 1000 ms timeout";
  std::cout << "[ info     ] rank 0: " << st[0] << "\n";
}

TEST(GlooCollectiveTest, AWorldOfOneNeedsNoStoreAndABadRankIsRefused) {
  auto one = NewGlooCollective(Options(0, 1, "gloo/one", milliseconds(1000)), nullptr);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE((*one)->AllReduceSum(data).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));

  MemoryStore store;
  auto bad = NewGlooCollective(Options(2, 2, "gloo/bad", milliseconds(1000)), &store);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
}

}  // namespace
}  // namespace tessera
