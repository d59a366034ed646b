// The plan's JSON form: a plan from the wire or a checkpoint is refused,
// never trusted into an overflow.
#include "common/sharding_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

ShardingPlan Plan() {
  ShardingPlan plan;
  plan.version = 4;
  plan.num_ps = 2;
  plan.shards = {{0, 0, 0, 100, 0, 8, 0, 1}, {1, 1, 0, 50, 0, 4, 1, -1}, {2, 1, 50, 50, 0, 4, 0, -1}};
  plan.tables = {{0, ShardingType::kTableWise, {0}}, {1, ShardingType::kRowWise, {1, 2}}};
  return plan;
}

TEST(ShardingPlanTest, RoundTrip) {
  auto back = ShardingPlan::FromJson(Plan().ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), Plan().ToJson());
}

// Found writing the fuzz target: rows ending past INT64_MAX overflowed in
// HoldsRow (signed overflow, undefined behaviour) on every server and
// trainer.
TEST(ShardingPlanTest, RowsEndingPastTheLargestIdAreRefused) {
  nlohmann::json j = Plan().ToJson();
  j["shards"][2]["row_offset"] = 9;
  j["shards"][2]["num_rows"] = INT64_MAX;
  auto plan = ShardingPlan::FromJson(j);
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("plan.shards[2]: rows [9, +"), std::string::npos) << plan.status();
  j["shards"][2]["row_offset"] = 0;
  EXPECT_TRUE(ShardingPlan::FromJson(j).ok());  // [0, INT64_MAX) ends at the largest id
}

}  // namespace
}  // namespace tessera
