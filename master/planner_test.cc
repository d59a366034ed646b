#include "master/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

TableConfig Table(const std::string& name, int64_t rows, int dim, const std::string& sharding = "") {
  TableConfig t;
  t.name = name;
  t.num_embeddings = rows;
  t.embedding_dim = dim;
  t.feature_names = {name + "_f"};
  t.sharding_type = sharding;
  return t;
}

TEST(PlannerTest, TableWiseBalancesBytes) {
  JobConfig job;
  for (int i = 0; i < 8; ++i) job.tables.push_back(Table("t" + std::to_string(i), 1000 * (i + 1), 16));
  auto plan = PlanSharding(job, PlannerOptions{2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->shards.size(), 8u);
  auto bytes = BytesPerServer(job, *plan);
  // 36,000 rows in all; greedy largest-first gets within one table of even.
  EXPECT_LE(std::abs(bytes[0] - bytes[1]), 1000 * 16 * 4);
  for (const ShardSpec& s : plan->shards) {
    EXPECT_EQ(s.row_offset, 0);
    EXPECT_EQ(s.num_rows, job.tables[s.table].num_embeddings);
  }
}

TEST(PlannerTest, RowWiseAndColumnWiseSplitUnevenSizes) {
  JobConfig job;
  job.tables.push_back(Table("rows", 10, 4, "row_wise"));
  job.tables.push_back(Table("cols", 7, 5, "column_wise"));
  auto plan = PlanSharding(job, PlannerOptions{3});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int64_t> rows;
  std::vector<int> cols, rows_ps, cols_ps;
  for (uint32_t id : plan->tables[0].shards) {
    rows.push_back(plan->shards[id].num_rows);
    rows_ps.push_back(plan->shards[id].ps);
  }
  for (uint32_t id : plan->tables[1].shards) {
    cols.push_back(plan->shards[id].num_cols);
    cols_ps.push_back(plan->shards[id].ps);
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(cols, (std::vector<int>{2, 2, 1}));
  std::sort(rows_ps.begin(), rows_ps.end());
  std::sort(cols_ps.begin(), cols_ps.end());
  EXPECT_EQ(rows_ps, (std::vector<int>{0, 1, 2}));  // distinct servers
  EXPECT_EQ(cols_ps, (std::vector<int>{0, 1, 2}));
  const ShardSpec& last = plan->shards[plan->tables[0].shards[2]];
  EXPECT_EQ(last.row_offset + last.num_rows, 10);
}

TEST(PlannerTest, JsonRoundTripAndFormat) {
  JobConfig job;
  job.tables.push_back(Table("a", 100, 8));
  job.tables.push_back(Table("b", 50, 4, "row_wise"));
  auto plan = PlanSharding(job, PlannerOptions{2});
  ASSERT_TRUE(plan.ok());
  auto back = ShardingPlan::FromJson(plan->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), plan->ToJson());
  const std::string text = FormatPlan(job, *plan);
  EXPECT_NE(text.find("table_wise"), std::string::npos);
  EXPECT_NE(text.find("row_wise"), std::string::npos);
  EXPECT_NE(text.find("rank:"), std::string::npos);
}

TEST(PlannerTest, UnsupportedTypeIsAClearError) {
  JobConfig job;
  job.tables.push_back(Table("dp", 10, 4, "data_parallel"));
  auto plan = PlanSharding(job, PlannerOptions{2});
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(plan.status().message().find("dp"), std::string::npos);
  EXPECT_FALSE(PlanSharding(job, PlannerOptions{0}).ok());
}

}  // namespace
}  // namespace tessera
