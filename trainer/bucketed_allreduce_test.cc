// BucketedAllReduce: where it cuts buckets, that it sums them while the
// caller goes on, how it fails; and over Gloo with ranks as threads, that the
// bucketed sums equal one allreduce's bit for bit with two trainers.
#include "trainer/bucketed_allreduce.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/memory_store.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Records each allreduce as [offset, offset + size) into the buffer `base`,
// with the thread that ran it; fails the calls numbered in fail_calls.
class RecordingCollective final : public Collective {
 public:
  explicit RecordingCollective(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int world() const override { return 2; }
  Status AllReduceSum(std::span<float> data) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t call = static_cast<int64_t>(calls_.size());
    calls_.push_back({data.data() - base_, static_cast<int64_t>(data.size())});
    threads_.push_back(std::this_thread::get_id());
    cv_.notify_all();
    if (call == fail_call) return Status::Unavailable("injected: peer gone");
    for (float& v : data) v *= 2.0f;  // as if a second trainer had the same values
    return Status::OK();
  }
  Status AllReduceSumDevice(float*, int64_t) override { return Status::FailedPrecondition("host only"); }

  std::vector<std::pair<int64_t, int64_t>> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  // True once `n` calls were made, false after 10 s.
  bool WaitForCalls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_.size() >= n; });
  }
  int64_t fail_call = -1;

 private:
  const float* base_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<int64_t, int64_t>> calls_;
  std::vector<std::thread::id> threads_;
};

using Calls = std::vector<std::pair<int64_t, int64_t>>;

TEST(BucketedAllReduceTest, CutsBucketsAtTheSizeFromTheEndAndSumsTheRestAtFinish) {
  std::vector<float> grads(30, 1.0f);
  RecordingCollective collective(grads.data());
  BucketedAllReduce buckets(&collective, 10);
  buckets.Begin(grads);
  buckets.Ready(25, 5);
  buckets.Ready(20, 5);  // [20, 30) holds 10: a bucket
  buckets.Ready(12, 8);
  buckets.Ready(3, 9);  // [3, 20) holds 17: a bucket
  buckets.Ready(0, 3);
  ASSERT_TRUE(buckets.Finish().ok());
  EXPECT_EQ(collective.calls(), (Calls{{20, 10}, {3, 17}, {0, 3}}));
  EXPECT_EQ(grads, std::vector<float>(30, 2.0f));  // every float summed once
  EXPECT_EQ(buckets.buckets_sent(), 3);
}

TEST(BucketedAllReduceTest, SumsABucketWhileTheCallerGoesOn) {
  std::vector<float> grads(100, 1.0f);
  RecordingCollective collective(grads.data());
  BucketedAllReduce buckets(&collective, 40);
  buckets.Begin(grads);
  buckets.Ready(50, 50);
  // Not finished, yet summed: on another thread than this one.
  ASSERT_TRUE(collective.WaitForCalls(1));
  EXPECT_EQ(collective.calls(), (Calls{{50, 50}}));
  EXPECT_NE(collective.threads()[0], std::this_thread::get_id());
  buckets.Ready(0, 50);
  ASSERT_TRUE(buckets.Finish().ok());
  EXPECT_EQ(collective.calls(), (Calls{{50, 50}, {0, 50}}));
  EXPECT_EQ(grads, std::vector<float>(100, 2.0f));
}

TEST(BucketedAllReduceTest, WhatIsNotReportedIsSummedAtFinish) {
  std::vector<float> grads(64, 1.0f);
  RecordingCollective collective(grads.data());
  BucketedAllReduce buckets(&collective, 1000);
  buckets.Begin(grads);
  ASSERT_TRUE(buckets.Finish().ok());
  buckets.Begin(grads);
  buckets.Ready(60, 4);  // below the bucket's size: goes with the rest
  ASSERT_TRUE(buckets.Finish().ok());
  EXPECT_EQ(collective.calls(), (Calls{{0, 64}, {0, 64}}));
  EXPECT_EQ(grads, std::vector<float>(64, 4.0f));
}

TEST(BucketedAllReduceTest, AFailedBucketFailsTheStepAndTheRestAreNotSent) {
  std::vector<float> grads(30, 1.0f);
  RecordingCollective collective(grads.data());
  collective.fail_call = 0;
  BucketedAllReduce buckets(&collective, 10);
  buckets.Begin(grads);
  buckets.Ready(20, 10);
  ASSERT_TRUE(collective.WaitForCalls(1));
  buckets.Ready(10, 10);
  buckets.Ready(0, 10);
  const Status st = buckets.Finish();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.ToString().find("peer gone"), std::string::npos) << st;
  EXPECT_EQ(collective.calls(), (Calls{{20, 10}}));
  EXPECT_EQ(buckets.buckets_sent(), 1);
  // A new step starts clean.
  buckets.Begin(grads);
  EXPECT_TRUE(buckets.Finish().ok());
  EXPECT_EQ(buckets.buckets_sent(), 2);
}

// Ranks as threads over Gloo (as trainer_gloo_collective_test): the bucketed
// sums of two trainers equal one allreduce of the whole buffer, bit for bit,
// whatever the values; with three, they are exact on small integers.
std::vector<std::unique_ptr<Collective>> OpenRanks(Store* store, int world, const std::string& prefix) {
  std::vector<std::unique_ptr<Collective>> out(world);
  std::vector<std::thread> threads;
  std::vector<Status> st(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooCollectiveOptions o;
      o.rank = r;
      o.world = world;
      o.prefix = prefix;
      o.timeout = milliseconds(30000);
      auto c = NewGlooCollective(o, store);
      st[r] = c.status();
      if (c.ok()) out[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return out;
}

// Layer ranges of a model of these sizes, reported last to first.
void ReportLayers(BucketedAllReduce* buckets, const std::vector<int64_t>& layer_sizes) {
  int64_t end = 0;
  for (int64_t n : layer_sizes) end += n;
  for (size_t i = layer_sizes.size(); i-- > 0;) {
    end -= layer_sizes[i];
    buckets->Ready(end, layer_sizes[i]);
  }
}

TEST(BucketedAllReduceTest, TwoGlooTrainersGetOneAllreducesSumsBitForBit) {
  const std::vector<int64_t> layers = {33000, 512, 131072, 256, 257};
  int64_t n = 0;
  for (int64_t s : layers) n += s;
  MemoryStore store;
  auto ranks = OpenRanks(&store, 2, "bucketed/2");
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& c : ranks) ASSERT_NE(c, nullptr);
  std::vector<std::vector<float>> bucketed(2), whole(2);
  for (int r = 0; r < 2; ++r) {
    std::mt19937 rng(100 + r);
    std::normal_distribution<float> value(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) bucketed[r].push_back(value(rng) * (1.0f + static_cast<float>(i % 97)));
    whole[r] = bucketed[r];
  }
  std::vector<Status> st(2), st_whole(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      BucketedAllReduce buckets(ranks[r].get(), 4096);
      for (int step = 0; step < 3; ++step) {  // the same buffer summed again: the values grow
        buckets.Begin(bucketed[r]);
        ReportLayers(&buckets, layers);
        st[r] = buckets.Finish();
        if (!st[r].ok()) return;
        st_whole[r] = ranks[r]->AllReduceSum(whole[r]);
        if (!st_whole[r].ok()) return;
      }
      // Each step: [33512, end) once the 131072 layer is in, then [0, 33512).
      EXPECT_EQ(buckets.buckets_sent(), 6) << "3 steps of 2 buckets";
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    ASSERT_TRUE(st_whole[r].ok()) << st_whole[r];
    EXPECT_EQ(0, std::memcmp(bucketed[r].data(), whole[r].data(), n * sizeof(float))) << "rank " << r;
  }
  EXPECT_EQ(0, std::memcmp(bucketed[0].data(), bucketed[1].data(), n * sizeof(float)));
}

TEST(BucketedAllReduceTest, ThreeGlooTrainersSumExactly) {
  const std::vector<int64_t> layers = {1000, 10, 5000, 3};
  int64_t n = 0;
  for (int64_t s : layers) n += s;
  MemoryStore store;
  auto ranks = OpenRanks(&store, 3, "bucketed/3");
  ASSERT_EQ(ranks.size(), 3u);
  for (const auto& c : ranks) ASSERT_NE(c, nullptr);
  std::vector<std::vector<float>> data(3, std::vector<float>(n));
  for (int r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < n; ++i) data[r][i] = static_cast<float>((i * 7 + r * 13) % 1001) - 500.0f;
  }
  std::vector<Status> st(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      BucketedAllReduce buckets(ranks[r].get(), 1000);
      buckets.Begin(data[r]);
      ReportLayers(&buckets, layers);
      st[r] = buckets.Finish();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r];
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < 3; ++r) want += static_cast<float>((i * 7 + r * 13) % 1001) - 500.0f;
    for (int r = 0; r < 3; ++r) ASSERT_EQ(data[r][i], want) << "rank " << r << ", element " << i;
  }
}

}  // namespace
}  // namespace tessera
