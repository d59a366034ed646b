#include "master/step_barrier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace tessera {
namespace {

bool All(int) { return true; }

TEST(StepBarrierTest, CompleteOnlyWhenEveryTrainingRankArrivedAtOneStep) {
  StepBarrier<std::string> b(3);
  int64_t step = -1;
  std::string why;
  EXPECT_EQ(b.Check(All, &step, &why), StepBarrier<std::string>::Outcome::kWaiting);
  b.Arrive(2, 40, "c");
  b.Arrive(0, 40, "a");
  EXPECT_EQ(b.Check(All, &step, &why), StepBarrier<std::string>::Outcome::kWaiting);
  b.Arrive(1, 40, "b");
  ASSERT_EQ(b.Check(All, &step, &why), StepBarrier<std::string>::Outcome::kComplete);
  EXPECT_EQ(step, 40);
  EXPECT_EQ(b.TakeAll(), (std::vector<std::string>{"a", "b", "c"}));  // rank order
  EXPECT_FALSE(b.Arrived(0));
  EXPECT_EQ(b.Check(All, &step, &why), StepBarrier<std::string>::Outcome::kWaiting);
}

TEST(StepBarrierTest, RanksThatNoLongerTrainAreNotWaitedFor) {
  StepBarrier<int> b(2);
  b.Arrive(0, 7, 100);
  int64_t step = -1;
  std::string why;
  auto only_rank0 = [](int r) { return r == 0; };
  ASSERT_EQ(b.Check(only_rank0, &step, &why), StepBarrier<int>::Outcome::kComplete);
  EXPECT_EQ(step, 7);
  auto none = [](int) { return false; };
  EXPECT_EQ(b.Check(none, &step, &why), StepBarrier<int>::Outcome::kWaiting);
}

TEST(StepBarrierTest, DifferentStepsAreAMismatchNamingBoth) {
  StepBarrier<int> b(2);
  b.Arrive(0, 5, 1);
  b.Arrive(1, 6, 2);
  int64_t step = -1;
  std::string why;
  ASSERT_EQ(b.Check(All, &step, &why), StepBarrier<int>::Outcome::kMismatch);
  EXPECT_NE(why.find("5"), std::string::npos);
  EXPECT_NE(why.find("6"), std::string::npos);
}

TEST(StepBarrierTest, ARetriedArrivalReplacesTheFirst) {
  StepBarrier<int> b(1);
  b.Arrive(0, 3, 1);
  b.Arrive(0, 3, 2);
  int64_t step = -1;
  std::string why;
  ASSERT_EQ(b.Check(All, &step, &why), StepBarrier<int>::Outcome::kComplete);
  EXPECT_EQ(b.TakeAll(), std::vector<int>{2});
}

TEST(StepBarrierTest, FirstArrivalIsWhenTheEarliestWaiterCame) {
  // The pause a checkpoint costs the trainers starts at the first arrival.
  StepBarrier<int> b(2);
  b.Arrive(1, 9, 1);
  const auto first = b.first_arrival();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  b.Arrive(0, 9, 2);
  EXPECT_EQ(b.first_arrival(), first);
  b.TakeAll();
  b.Arrive(0, 10, 3);
  EXPECT_GT(b.first_arrival(), first);  // a new boundary, a new pause
}

}  // namespace
}  // namespace tessera
