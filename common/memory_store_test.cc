#include "common/memory_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(MemoryStoreTest, GetReturnsWhatWasSetBytesIncluded) {
  MemoryStore store;
  const std::string bytes("a\0b\xff", 4);
  ASSERT_TRUE(store.Set("k", bytes).ok());
  ASSERT_TRUE(store.Set("empty", "").ok());
  auto v = store.Get("k", milliseconds(0));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, bytes);
  auto e = store.Get("empty", milliseconds(0));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, "");
}

TEST(MemoryStoreTest, ASetAgainReplacesTheValue) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("k", "first").ok());
  ASSERT_TRUE(store.Set("k", "second").ok());
  auto v = store.Get("k", milliseconds(0));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "second");
}

TEST(MemoryStoreTest, GetWaitsForASetFromAnotherThread) {
  MemoryStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(store.Set("other", "x").ok());  // wakes the getter for nothing
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(store.Set("k", "late").ok());
  });
  const auto start = Clock::now();
  auto v = store.Get("k", milliseconds(10000));
  const auto waited = Clock::now() - start;
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "late");
  EXPECT_GE(waited, milliseconds(90));
  EXPECT_LT(waited, milliseconds(5000));
}

TEST(MemoryStoreTest, ManyWaitersOnOneKeyAllGetIt) {
  MemoryStore store;
  constexpr int kWaiters = 8;
  std::vector<std::string> got(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      auto v = store.Get("k", milliseconds(10000));
      got[i] = v.ok() ? *v : v.status().ToString();
    });
  }
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(store.Set("k", "v").ok());
  for (std::thread& t : waiters) t.join();
  for (int i = 0; i < kWaiters; ++i) EXPECT_EQ(got[i], "v") << "waiter " << i;
}

TEST(MemoryStoreTest, AKeyNeverSetTimesOutNamingTheKey) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("present", "x").ok());
  const auto start = Clock::now();
  auto v = store.Get("gloo/job/rank_3", milliseconds(100));
  const auto waited = Clock::now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded) << v.status();
  EXPECT_NE(v.status().message().find("gloo/job/rank_3"), std::string::npos) << v.status();
  EXPECT_GE(waited, milliseconds(100));
  EXPECT_LT(waited, milliseconds(5000));

  // A zero timeout only looks.
  auto now = store.Get("absent", milliseconds(0));
  EXPECT_EQ(now.status().code(), StatusCode::kDeadlineExceeded) << now.status();
}

}  // namespace
}  // namespace tessera
