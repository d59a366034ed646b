// The manifest's checks: what the master writes reads back, and a damaged
// manifest is DATA_LOSS (an older checkpoint may serve), never a crash.
#include "master/checkpoint_manifest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>

#include "master/checkpoint_files.h"

namespace tessera {
namespace {

using nlohmann::json;

// Two tables: what the checkpoint was taken of, and what resumes from it.
JobConfig Job() {
  json job = {{"model", {{"top_mlp", {1}}}},
              {"data", {{"source", "synthetic"}}},
              {"training", {{"batch_size", 4}, {"steps", 1}}},
              {"tables", json::array()}};
  for (const auto& [name, dim] : {std::pair<std::string, int>{"a", 8}, {"b", 4}}) {
    job["tables"].push_back(
        {{"name", name}, {"num_embeddings", 100}, {"embedding_dim", dim}, {"feature_names", {"f_" + name}}});
  }
  auto parsed = ParseJobConfigJson(job, "");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return *parsed;
}

// Table a whole, table b cut in two row ranges.
ShardingPlan Plan() {
  ShardingPlan plan;
  plan.num_ps = 2;
  plan.shards = {{0, 0, 0, 100, 0, 8, 0, -1}, {1, 1, 0, 50, 0, 4, 0, -1}, {2, 1, 50, 50, 0, 4, 1, -1}};
  plan.tables = {{0, ShardingType::kTableWise, {0}}, {1, ShardingType::kRowWise, {1, 2}}};
  return plan;
}

json Shards() {
  return json::array({{{"shard_id", 0}, {"path", "ps0/shard0"}, {"rows", 100}},
                      {{"shard_id", 1}, {"path", "ps0/shard1"}},
                      {{"shard_id", 2}, {"path", "ps1/shard2"}}});
}

StatusOr<CheckedManifest> Check(const json& manifest) {
  auto parsed = ParseManifest(manifest.dump(2));
  if (!parsed.ok()) return parsed.status();
  return CheckManifest(*parsed, Job());
}

TEST(CheckpointManifestTest, WhatIsWrittenReadsBack) {
  auto m = Check(MakeManifest(300, Job().ToJson(), Plan().ToJson(), Shards()));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step, 300);
  EXPECT_EQ(m->trainer_state, "trainer.params");
  ASSERT_EQ(m->shards.size(), 3u);
  EXPECT_EQ(m->shards[2].table, "b");
  EXPECT_EQ(m->shards[2].spec.row_offset, 50);
  EXPECT_EQ(m->shards[2].path, "ps1/shard2");
}

// A full disk is named in the system's words, as the servers name it, so
// the operator reads the same cause whichever write of a checkpoint meets it
// first: a server's shard or the master's manifest.
TEST(CheckpointManifestTest, AFullDiskIsNamed) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  const Status st = WriteFileDurably("/dev/full", "{}\n");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("No space left on device"), std::string::npos) << st;
  EXPECT_NE(st.message().find("/dev/full"), std::string::npos) << st;
}

TEST(CheckpointManifestTest, DamagedText) {
  EXPECT_EQ(ParseManifest("{\"step\": 3, \"job\"").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseManifest("[1, 2]").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseManifest("{\"step\": \"3\"}").status().code(), StatusCode::kDataLoss);
}

TEST(CheckpointManifestTest, ShardsMissingOrTwice) {
  json lacking = Shards();
  lacking.erase(1);
  auto m = Check(MakeManifest(1, Job().ToJson(), Plan().ToJson(), lacking));
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("lacks shard 1 of table b"), std::string::npos) << m.status();
  json twice = Shards();
  twice[1]["shard_id"] = 0;
  EXPECT_EQ(Check(MakeManifest(1, Job().ToJson(), Plan().ToJson(), twice)).status().code(), StatusCode::kDataLoss);
}

TEST(CheckpointManifestTest, AnotherJobsTables) {
  JobConfig other = Job();
  other.tables[1].embedding_dim = 16;
  auto m = Check(MakeManifest(1, other.ToJson(), Plan().ToJson(), Shards()));
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << m.status();
}

// A fuzzer's find: a plan naming a table its job lacks made the master read
// past the job's tables (heap overflow) on --resume.
TEST(CheckpointManifestTest, PlanOutsideItsJob) {
  ShardingPlan plan = Plan();
  plan.shards[2].table = 2;
  auto m = Check(MakeManifest(1, Job().ToJson(), plan.ToJson(), Shards()));
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("which the job (2 tables) lacks"), std::string::npos) << m.status();
  plan = Plan();
  plan.shards[2].num_rows = 51;  // rows [50, 101) of a 100-row table
  m = Check(MakeManifest(1, Job().ToJson(), plan.ToJson(), Shards()));
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("outside table b"), std::string::npos) << m.status();
}

// Found writing the fuzz target: a shard id of 1e30 was cast to uint32_t
// (undefined behaviour) and one of -1 read as shard 4294967295.
TEST(CheckpointManifestTest, FieldsOfTheWrongTypeOrRange) {
  auto damaged = [](const std::function<void(json&)>& edit, const std::string& expect) {
    json m = MakeManifest(1, Job().ToJson(), Plan().ToJson(), Shards());
    edit(m);
    auto checked = Check(m);
    EXPECT_EQ(checked.status().code(), StatusCode::kDataLoss) << expect;
    EXPECT_NE(checked.status().message().find(expect), std::string::npos) << checked.status();
  };
  damaged([](json& m) { m["shards"][2]["shard_id"] = 1e30; }, "manifest.shards[2].shard_id: must be an integer");
  damaged([](json& m) { m["shards"][2]["shard_id"] = -1; }, "manifest.shards[2].shard_id: must be in [0, ");
  damaged([](json& m) { m["shards"][0]["path"] = 5; }, "manifest.shards[0].path: must be a string");
  damaged([](json& m) { m["shards"] = "all"; }, "manifest.shards: required list is missing");
  damaged([](json& m) { m["plan"] = json::array(); }, "manifest.plan: must be a JSON object");
  damaged([](json& m) { m["trainer_state"] = "../../elsewhere"; }, "must name a file in the checkpoint's folder");
  damaged([](json& m) { m["step"] = -3; }, "manifest.step: must be in [0, ");
}

}  // namespace
}  // namespace tessera
