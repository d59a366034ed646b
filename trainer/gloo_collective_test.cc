// The Gloo collective with its ranks as threads of this process, meeting
// through one MemoryStore and talking TCP over 127.0.0.1 (as Gloo's own tests
// do): no master needed.
#include <gtest/gtest.h>
#include <signal.h>

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

// The trainers' secret in a job with keys (the sealed ring); none: Gloo's
// own allreduce.
const std::string kTrainerSecret(32, '\x21');

GlooCollectiveOptions Options(int rank, int world, const std::string& prefix, milliseconds timeout,
                              const std::string& secret = "") {
  GlooCollectiveOptions o;
  o.rank = rank;
  o.world = world;
  o.prefix = prefix;
  o.timeout = timeout;
  o.seal_secret = secret;
  return o;
}

// Opens ranks [0, present) of a world of `world`, together; each rank's
// result is in its slot. secret_of(r): rank r's seal secret.
std::vector<StatusOr<std::unique_ptr<Collective>>> OpenRanks(
    Store* store, int world, int present, const std::string& prefix, milliseconds timeout,
    const std::function<std::string(int)>& secret_of = [](int) { return std::string(); }) {
  std::vector<StatusOr<std::unique_ptr<Collective>>> out;
  for (int r = 0; r < present; ++r) out.emplace_back(Status::Internal("not opened"));
  OnThreads(present,
            [&](int r) { out[r] = NewGlooCollective(Options(r, world, prefix, timeout, secret_of(r)), store); });
  return out;
}

// Plain (Gloo's allreduce) and sealed (the ring of sealed messages).
class GlooCollectiveTest : public testing::TestWithParam<bool> {
 protected:
  std::string Secret() const { return GetParam() ? kTrainerSecret : std::string(); }
  std::vector<StatusOr<std::unique_ptr<Collective>>> Open(Store* store, int world, int present,
                                                          const std::string& prefix, milliseconds timeout) {
    const std::string secret = Secret();
    return OpenRanks(store, world, present, prefix + (GetParam() ? "/sealed" : "/plain"), timeout,
                     [&](int) { return secret; });
  }
};

// Rank r's element i. Small integers: every sum is exact in float, in any
// order, so the expected sum is known exactly.
float IntValue(int r, size_t i, int round) { return static_cast<float>((i * 7 + r * 13 + round) % 1001) - 500.0f; }

TEST_P(GlooCollectiveTest, RanksAsThreadsSumOnEveryRankAndAgain) {
  constexpr int kWorld = 3;
  MemoryStore store;
  auto opened = Open(&store, kWorld, kWorld, "gloo/sum", milliseconds(30000));
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

TEST_P(GlooCollectiveTest, ARankThatNeverComesMakesTheOthersFailInTime) {
  constexpr int kWorld = 3;
  const milliseconds timeout(500);
  MemoryStore store;
  const auto start = Clock::now();
  auto opened = Open(&store, kWorld, kWorld - 1, "gloo/missing", timeout);  // rank 2 never comes
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

TEST_P(GlooCollectiveTest, ARankThatStopsTakingPartMakesTheSumFailInTime) {
  constexpr int kWorld = 3;
  MemoryStore store;
  auto opened = Open(&store, kWorld, kWorld, "gloo/stops", milliseconds(1000));
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

// A peer that dies mid-job closes its connections. A sum that writes to
// them must fail with an error, not kill the process with SIGPIPE (a
// trainer died so, exit 141, when its peer was killed; the master then
// named the wrong trainer). In one process the closed connection is mostly
// seen on a read first, so it is SIGPIPE's disposition that tells a
// collective that leaves writes exposed to it.
TEST_P(GlooCollectiveTest, APeerThatClosesItsConnectionsFailsTheSumAndTheProcessLives) {
  MemoryStore store;
  auto opened = Open(&store, 2, 2, "gloo/closed", milliseconds(2000));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(opened[r].ok()) << "rank " << r << ": " << opened[r].status();
  struct sigaction pipe {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &pipe), 0);
  EXPECT_EQ(pipe.sa_handler, SIG_IGN) << "a Gloo collective leaves SIGPIPE ignored, so a write to a dead peer fails";
  opened[1] = Status::Unavailable("rank 1 died");  // its sockets close
  std::vector<float> data(size_t{1} << 22, 1.0f);  // 16 MiB: more than the sockets' buffers take
  Status st;
  for (int attempt = 0; attempt < 3 && st.ok(); ++attempt) st = (*opened[0])->AllReduceSum(data);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  std::cout << "[ info     ] rank 0: " << st << "\n";
}

INSTANTIATE_TEST_SUITE_P(PlainAndSealed, GlooCollectiveTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) { return p.param ? "Sealed" : "Plain"; });

// The sealed ring's fixed order: chunk c of W is rank c's part, plus rank
// c + 1's, ... round the ring; chunk c is [n c / W, n (c + 1) / W).
std::vector<float> RingOrderSum(const std::vector<std::vector<float>>& parts) {
  const size_t world = parts.size(), n = parts[0].size();
  std::vector<float> sum(n);
  for (size_t c = 0; c < world; ++c) {
    for (size_t i = n * c / world; i < n * (c + 1) / world; ++i) {
      float acc = parts[c][i];
      for (size_t k = 1; k < world; ++k) acc = parts[(c + k) % world][i] + acc;
      sum[i] = acc;
    }
  }
  return sum;
}

TEST(SealedGlooCollectiveTest, SumsInTheRingsFixedOrderForEveryWorld) {
  for (int world : {2, 3, 4}) {
    MemoryStore store;
    auto opened = OpenRanks(&store, world, world, "gloo/order" + std::to_string(world), milliseconds(30000),
                            [](int) { return kTrainerSecret; });
    for (int r = 0; r < world; ++r) ASSERT_TRUE(opened[r].ok()) << "rank " << r << ": " << opened[r].status();
    for (size_t n : {size_t{1}, size_t{5}, size_t{100003}}) {
      std::vector<std::vector<float>> data(world, std::vector<float>(n));
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < n; ++i) data[r][i] = static_cast<float>(r + 1) / static_cast<float>(i + 3) + 1e-3f * r;
      }
      const std::vector<float> want = RingOrderSum(data);
      std::vector<Status> st(world);
      OnThreads(world, [&](int r) { st[r] = (*opened[r])->AllReduceSum(data[r]); });
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(st[r].ok()) << "world " << world << ", rank " << r << ": " << st[r];
        ASSERT_EQ(data[r], want) << "world " << world << ", " << n << " floats, rank " << r;
      }
    }
  }
}

// The last rank has taken a trainer's place in the rendezvous (as a stranger
// on its Gloo port could) but lacks the trainers' secret. Rank 0 receives
// from it (its ring predecessor; in a pair, its one peer).
void ExpectAStrangersPartRefused(int world) {
  MemoryStore store;
  std::string stranger = kTrainerSecret;
  stranger[0] ^= 1;
  const int last = world - 1;
  auto opened = OpenRanks(&store, world, world, "gloo/stranger" + std::to_string(world), milliseconds(3000),
                          [&](int r) { return r == last ? stranger : kTrainerSecret; });
  for (int r = 0; r < world; ++r) ASSERT_TRUE(opened[r].ok()) << "rank " << r << ": " << opened[r].status();

  // 30,000 floats: what rank 0 receives (a ring's chunk of 10,000, or a
  // pair's whole buffer) opens in several pieces, added into its sum before
  // the tag is checked at the end.
  const size_t n = 30000;
  std::vector<std::vector<float>> data(world, std::vector<float>(n));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = IntValue(r, i, 0);
  }
  const std::vector<std::vector<float>> before = data;
  std::vector<Status> st(world);
  OnThreads(world, [&](int r) { st[r] = (*opened[r])->AllReduceSum(data[r]); });
  // Rank 0 refuses what came. The other trainers then wait for rank 0,
  // which gave up: they fail too, by their timeout.
  ASSERT_FALSE(st[0].ok());
  EXPECT_EQ(st[0].code(), StatusCode::kPermissionDenied) << st[0];
  EXPECT_NE(st[0].message().find("trainer " + std::to_string(last)), std::string::npos) << st[0];
  EXPECT_NE(st[0].message().find("does not open"), std::string::npos) << st[0];
  for (int r = 0; r < last; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_EQ(data[r], before[r]) << "rank " << r << "'s gradients changed in a refused sum";
  }
  // The collective is spent: the next sum fails at once, with the reason.
  std::vector<float> again(10, 1.0f);
  const auto start = Clock::now();
  const Status next = (*opened[0])->AllReduceSum(again);
  EXPECT_EQ(next.code(), StatusCode::kPermissionDenied) << next;
  EXPECT_NE(next.message().find("spent"), std::string::npos) << next;
  EXPECT_LT(Clock::now() - start, milliseconds(100));
  EXPECT_EQ(again, std::vector<float>(10, 1.0f));
  std::cout << "[ info     ] rank 0: " << st[0] << "\n";
}

TEST(SealedGlooCollectiveTest, AStrangersPartIsRefusedAndChangesNothing) { ExpectAStrangersPartRefused(3); }

// Two trainers sum in one exchange instead of the ring's two.
TEST(SealedGlooCollectiveTest, AStrangersWholeBufferInAPairIsRefusedAndChangesNothing) {
  ExpectAStrangersPartRefused(2);
}

TEST(GlooCollectiveStandaloneTest, AWorldOfOneNeedsNoStoreAndABadRankIsRefused) {
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
