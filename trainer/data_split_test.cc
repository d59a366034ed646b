#include "trainer/data_split.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tessera {
namespace {

// The examples (epoch, position) a job reads in step `step`, concatenated by rank.
std::vector<std::pair<int64_t, int64_t>> StepExamples(int64_t step, int world, int64_t batch, int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int r = 0; r < world; ++r) {
    const StepShare s = ShareOfStep(step, r, world, batch, n);
    for (int64_t i = 0; i < s.count; ++i) out.emplace_back(s.epoch, s.begin + i);
  }
  return out;
}

TEST(DataSplitTest, StepsPerEpoch) {
  EXPECT_EQ(StepsPerEpoch(1, 128, 7200), 57);  // 56 full batches + 32
  EXPECT_EQ(StepsPerEpoch(2, 64, 7200), 57);
  EXPECT_EQ(StepsPerEpoch(4, 10, 40), 1);
  EXPECT_EQ(StepsPerEpoch(4, 10, 41), 2);
  EXPECT_EQ(StepsPerEpoch(3, 100, 1), 1);
}

TEST(DataSplitTest, TwoTrainersMatchOneTrainerWithDoubleBatch) {
  for (int64_t n : {7200, 7201, 1000, 129, 1}) {
    const int64_t batch = 64;
    const int64_t steps = 3 * StepsPerEpoch(1, 2 * batch, n);
    ASSERT_EQ(StepsPerEpoch(2, batch, n), StepsPerEpoch(1, 2 * batch, n));
    for (int64_t step = 0; step < steps; ++step) {
      ASSERT_EQ(StepExamples(step, 2, batch, n), StepExamples(step, 1, 2 * batch, n)) << "n=" << n << " step=" << step;
      ASSERT_EQ(ShareOfStep(step, 0, 2, batch, n).global_count, ShareOfStep(step, 0, 1, 2 * batch, n).global_count);
      ASSERT_EQ(ShareOfStep(step, 1, 2, batch, n).global_count, ShareOfStep(step, 0, 1, 2 * batch, n).global_count);
    }
  }
}

TEST(DataSplitTest, ShortLastBatchOfEpoch) {
  // N = 7200, W = 1, B = 128: the 57th step holds the last 32 examples, and
  // the next step starts epoch 1 at position 0.
  const StepShare last = ShareOfStep(56, 0, 1, 128, 7200);
  EXPECT_EQ(last.epoch, 0);
  EXPECT_EQ(last.begin, 7168);
  EXPECT_EQ(last.count, 32);
  EXPECT_EQ(last.global_count, 32);
  const StepShare next = ShareOfStep(57, 0, 1, 128, 7200);
  EXPECT_EQ(next.epoch, 1);
  EXPECT_EQ(next.begin, 0);
  EXPECT_EQ(next.count, 128);
  EXPECT_EQ(next.global_count, 128);
}

TEST(DataSplitTest, TrainerWithNoExamples) {
  // N = 25, W = 4, B = 10: step 0 is [0, 25): ranks get 10, 10, 5, 0.
  const int64_t expect_begin[] = {0, 10, 20, 25};
  const int64_t expect_count[] = {10, 10, 5, 0};
  for (int r = 0; r < 4; ++r) {
    const StepShare s = ShareOfStep(0, r, 4, 10, 25);
    EXPECT_EQ(s.epoch, 0);
    EXPECT_EQ(s.begin, expect_begin[r]) << r;
    EXPECT_EQ(s.count, expect_count[r]) << r;
    EXPECT_EQ(s.global_count, 25);
  }
  // Second epoch, same pattern.
  const StepShare s = ShareOfStep(1, 3, 4, 10, 25);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.begin, 25);
}

TEST(DataSplitTest, RandomJobsCoverEachExampleOncePerEpoch) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 2000)(rng);
    const int world = std::uniform_int_distribution<int>(1, 9)(rng);
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    const int64_t spe = StepsPerEpoch(world, batch, n);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::vector<int> seen(n, 0);
      int64_t next = 0;  // shares, by step then rank, tile the epoch in order
      for (int64_t step = epoch * spe; step < (epoch + 1) * spe; ++step) {
        int64_t in_step = 0;
        for (int r = 0; r < world; ++r) {
          const StepShare s = ShareOfStep(step, r, world, batch, n);
          ASSERT_EQ(s.epoch, epoch);
          ASSERT_GE(s.count, 0);
          ASSERT_LE(s.count, batch);
          ASSERT_LE(s.begin + s.count, n);
          if (s.count > 0) {
            ASSERT_EQ(s.begin, next);
          }
          for (int64_t i = s.begin; i < s.begin + s.count; ++i) ++seen[i];
          next += s.count;
          in_step += s.count;
        }
        for (int r = 0; r < world; ++r) ASSERT_EQ(ShareOfStep(step, r, world, batch, n).global_count, in_step);
        ASSERT_GE(in_step, 1);
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[i], 1) << "n=" << n << " W=" << world << " B=" << batch << " example " << i;
      }
    }
  }
}

TEST(DataSplitDeathTest, RejectsBadArguments) {
  EXPECT_DEATH(ShareOfStep(0, 2, 2, 10, 100), "");
  EXPECT_DEATH(ShareOfStep(-1, 0, 2, 10, 100), "");
  EXPECT_DEATH(StepsPerEpoch(0, 10, 100), "");
  EXPECT_DEATH(StepsPerEpoch(1, 0, 100), "");
}

}  // namespace
}  // namespace tessera
