#include "trainer/eval_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tessera {
namespace {

TEST(EvalMetricsTest, Auc) {
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{1, 2, 3}, std::vector<float>{0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{3, 2, 1}, std::vector<float>{0, 1, 1}), 0.0);
  // Ties count half.
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{1, 1, 1, 1}, std::vector<float>{0, 1, 0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{1, 2}, std::vector<float>{1, 1}), 0.5);  // one class
}

TEST(EvalMetricsTest, LogLoss) {
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{0, 0}, std::vector<float>{0, 1}), std::log(2.0), 1e-7);
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{100}, std::vector<float>{1}), 0.0, 1e-6);
}

}  // namespace
}  // namespace tessera
