// The plan's JSON form and its checks against a job: a plan from the wire or
// a checkpoint is refused, never trusted into an overflow or an index past
// the job's tables.
#include "common/sharding_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/job_config.h"

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

JobConfig Job() {
  auto job = ParseJobConfig(R"({
    "tables": [{"name": "a", "num_embeddings": 100, "embedding_dim": 8, "feature_names": ["f0"]},
               {"name": "b", "num_embeddings": 100, "embedding_dim": 4, "feature_names": ["f1"]}],
    "model": {"top_mlp": [1]}, "data": {"source": "synthetic"}, "training": {"batch_size": 4, "steps": 1}})",
                            "");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

TEST(ShardingPlanTest, RoundTripAndFitsItsJob) {
  auto back = ShardingPlan::FromJson(Plan().ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), Plan().ToJson());
  EXPECT_TRUE(back->FitsJob(Job()).ok());
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

TEST(ShardingPlanTest, PlanOfAnotherJob) {
  ShardingPlan plan = Plan();
  plan.shards[1].table = 2;
  EXPECT_NE(plan.FitsJob(Job()).message().find("shard 1 is of table 2, which the job (2 tables) lacks"),
            std::string::npos);
  plan = Plan();
  plan.tables.push_back({5, ShardingType::kTableWise, {}});
  EXPECT_FALSE(plan.FitsJob(Job()).ok());
  plan = Plan();
  plan.shards[2].num_rows = 51;
  EXPECT_NE(plan.FitsJob(Job()).message().find("rows [50, +51) outside table b's 100"), std::string::npos);
  plan = Plan();
  plan.shards[0].col_offset = 4;  // columns [4, 12) of an 8-wide table
  EXPECT_NE(plan.FitsJob(Job()).message().find("columns [4, +8) outside table a's 8"), std::string::npos);
}

}  // namespace
}  // namespace tessera
