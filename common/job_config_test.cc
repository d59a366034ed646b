#include "common/job_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

using nlohmann::json;

json MinimalJob() {
  return json::parse(R"({
    "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"]}],
    "model": {"num_dense_features": 3, "bottom_mlp": [8, 4], "top_mlp": [16, 1]},
    "data": {"source": "synthetic", "num_examples": 100},
    "training": {"batch_size": 8, "steps": 5}
  })");
}

Status ParseError(const json& j) { return ParseJobConfigJson(j, "/base").status(); }

TEST(JobConfigTest, ParsesWithDefaults) {
  auto c = ParseJobConfigJson(MinimalJob(), "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tables[0].pooling, PoolingType::kSum);
  EXPECT_EQ(c->tables[0].optimizer.type, "sgd");
  EXPECT_EQ(c->training.consistency, Consistency::kSync);
  EXPECT_EQ(c->InteractionWidth(), 4 + 4);
  EXPECT_EQ(c->TableOfFeature("f"), 0);
  EXPECT_EQ(c->TableOfFeature("g"), -1);
  EXPECT_EQ(c->tables[0].RowBytes(), 16);
}

// Prefetch changes no lookup's rows in either mode (the servers hold a
// prefetched lookup for the update before it), so it is on unless the job
// says otherwise.
TEST(JobConfigTest, PrefetchIsOnByDefaultInBothModes) {
  auto prefetch = [](const char* mode, const json* value) {
    json j = MinimalJob();
    j["training"]["consistency"] = mode;
    if (value != nullptr) j["training"]["prefetch"] = *value;
    auto c = ParseJobConfigJson(j, "/base");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() && c->training.prefetch;
  };
  const json yes = true, no = false;
  EXPECT_TRUE(prefetch("sync", nullptr));
  EXPECT_TRUE(prefetch("async", nullptr));
  EXPECT_FALSE(prefetch("sync", &no));
  EXPECT_TRUE(prefetch("async", &yes));
}

// TorchRec's QCommsConfig: fp32 both ways unless the job asks.
TEST(JobConfigTest, QuantizedCommsOnlyWhenAskedFor) {
  json j = MinimalJob();
  auto c = ParseJobConfigJson(j, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training.forward_precision, CommPrecision::kFp32);
  EXPECT_EQ(c->training.backward_precision, CommPrecision::kFp32);
  j["training"]["qcomms"] = {{"backward_precision", "bf16"}};
  c = ParseJobConfigJson(j, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->training.forward_precision, CommPrecision::kFp32);
  EXPECT_EQ(c->training.backward_precision, CommPrecision::kBf16);
  auto again = ParseJobConfigJson(c->ToJson(), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->training.backward_precision, CommPrecision::kBf16);
  EXPECT_EQ(c->ToJson()["training"]["qcomms"]["forward_precision"], "fp32");
}

// NCCL's connections are in the clear: a job with keys uses them only when
// its config says so.
TEST(JobConfigTest, UnsealedNcclOnlyWhenAskedFor) {
  json j = MinimalJob();
  auto c = ParseJobConfigJson(j, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->runtime.unsealed_nccl);
  j["runtime"] = {{"unsealed_nccl", true}};
  c = ParseJobConfigJson(j, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->runtime.unsealed_nccl);
  EXPECT_EQ(c->ToJson()["runtime"]["unsealed_nccl"], true);
  j["runtime"] = {{"unsealed_nccl", "yes"}};
  EXPECT_FALSE(ParseJobConfigJson(j, "/base").ok());
}

TEST(JobConfigTest, RoundTripsThroughJson) {
  auto c = ParseJobConfigJson(MinimalJob(), "/base");
  ASSERT_TRUE(c.ok());
  auto again = ParseJobConfigJson(c->ToJson(), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), c->ToJson());
  EXPECT_EQ(again->tables[0].seed, c->tables[0].seed);
}

// A job for trainers that bring their own model (Python) has none, and
// keeps having none through the master (StartInfo carries ToJson).
TEST(JobConfigTest, AJobWithoutAModelStaysWithoutOne) {
  json j = MinimalJob();
  j.erase("model");
  auto c = ParseJobConfigJson(j, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_model);
  EXPECT_FALSE(c->ToJson().contains("model"));
  auto again = ParseJobConfigJson(c->ToJson(), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->has_model);
  EXPECT_TRUE(ParseJobConfigJson(MinimalJob(), "/base")->has_model);
  j["model"] = json::array();
  EXPECT_NE(ParseError(j).message().find("model: must be a JSON object"), std::string::npos) << ParseError(j);
}

TEST(JobConfigTest, TableSeedsDependOnNameNotOrder) {
  json a = MinimalJob();
  a["tables"].push_back({{"name", "u"}, {"num_embeddings", 5}, {"embedding_dim", 2}, {"feature_names", {"g"}}});
  json b = a;
  std::swap(b["tables"][0], b["tables"][1]);
  auto ca = ParseJobConfigJson(a, ""), cb = ParseJobConfigJson(b, "");
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ(ca->tables[0].seed, cb->tables[1].seed);
  EXPECT_NE(ca->tables[0].seed, ca->tables[1].seed);
}

// A family of tables and shared defaults expand to exactly the long form.
TEST(JobConfigTest, TableFamiliesAndDefaultsExpandToTheLongForm) {
  json compact = MinimalJob();
  compact.erase("tables");
  compact["table_defaults"] = {{"embedding_dim", 8}, {"pooling", "MEAN"}, {"optimizer", {{"type", "adagrad"}, {"lr", 0.1}}}};
  compact["tables"] = json::array({{{"name", "own"}, {"num_embeddings", 7}, {"feature_names", {"o"}}, {"embedding_dim", 2}}});
  compact["table_families"] = json::array(
      {{{"names", "t_C{i}"}, {"range", {2, 4}}, {"feature_names", {"C{i}", "D{i}"}}, {"num_embeddings", {10, 20, 30}}},
       {{"names", "s{i}"}, {"range", {0, 1}}, {"feature_names", {"s{i}"}}, {"num_embeddings", 5}, {"pooling", "SUM"}}});
  json long_form = MinimalJob();
  auto table = [](const std::string& name, int64_t rows, int dim, std::vector<std::string> features,
                  const std::string& pooling) {
    return json{{"name", name},         {"num_embeddings", rows}, {"embedding_dim", dim},
                {"feature_names", features}, {"pooling", pooling},
                {"optimizer", {{"type", "adagrad"}, {"lr", 0.1}}}};
  };
  long_form["tables"] = json::array({table("own", 7, 2, {"o"}, "MEAN"), table("t_C2", 10, 8, {"C2", "D2"}, "MEAN"),
                                     table("t_C3", 20, 8, {"C3", "D3"}, "MEAN"), table("t_C4", 30, 8, {"C4", "D4"}, "MEAN"),
                                     table("s0", 5, 8, {"s0"}, "SUM"), table("s1", 5, 8, {"s1"}, "SUM")});
  auto a = ParseJobConfigJson(compact, ""), b = ParseJobConfigJson(long_form, "");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->ToJson(), b->ToJson());
  ASSERT_EQ(a->tables.size(), 6u);
  EXPECT_EQ(a->tables[3].feature_names, (std::vector<std::string>{"C4", "D4"}));
  EXPECT_EQ(a->tables[3].num_embeddings, 30);

  // Errors name the family and the member.
  json bad = compact;
  bad["table_families"][0]["num_embeddings"] = {10, 20};
  EXPECT_NE(ParseError(bad).message().find("table_families[0].num_embeddings: a list needs one per member (3)"),
            std::string::npos)
      << ParseError(bad);
  bad = compact;
  bad["table_families"][0]["num_embeddings"] = {10, 0, 30};
  EXPECT_NE(ParseError(bad).message().find("table_families[0][1] (t_C3).num_embeddings"), std::string::npos)
      << ParseError(bad);
  bad = compact;
  bad["table_families"][1]["names"] = "s";
  EXPECT_NE(ParseError(bad).message().find("table_families[1].names"), std::string::npos) << ParseError(bad);
  bad = compact;
  bad["table_families"][1]["range"] = {3, 1};
  EXPECT_NE(ParseError(bad).message().find("table_families[1].range"), std::string::npos) << ParseError(bad);
  bad = compact;
  bad["table_defaults"]["name"] = "x";
  EXPECT_NE(ParseError(bad).message().find("table_defaults.name"), std::string::npos) << ParseError(bad);
  bad = compact;
  bad["table_defaults"]["embeding_dim"] = 3;  // a typo in a default is still an unknown field
  EXPECT_NE(ParseError(bad).message().find("embeding_dim"), std::string::npos) << ParseError(bad);
  bad = compact;
  bad.erase("tables");
  bad.erase("table_families");
  EXPECT_NE(ParseError(bad).message().find("tables: none given"), std::string::npos) << ParseError(bad);
}

TEST(JobConfigTest, ClearErrors) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  std::vector<Case> cases = {
      {[](json& j) { j["tables"][0]["embedding_dim"] = 0; }, "tables[0].embedding_dim: must be in"},
      {[](json& j) { j["tables"][0].erase("num_embeddings"); }, "tables[0].num_embeddings: required"},
      {[](json& j) { j["tables"][0]["pooling"] = "MAX"; }, "unknown pooling 'MAX'"},
      {[](json& j) { j["tables"][0]["optimizer"] = {{"type", "lamb"}}; }, "unknown optimizer 'lamb'"},
      {[](json& j) { j["tables"][0]["num_embeddings"] = "many"; }, "must be an integer"},
      {[](json& j) { j["tables"][0]["embeding_dim"] = 4; }, "tables[0].embeding_dim: unknown field"},
      {[](json& j) { j["model"]["top_mlp"] = {16, 2}; }, "must end with 1"},
      {[](json& j) { j["training"]["consistency"] = "eventual"; }, "training.consistency"},
      {[](json& j) { j["training"]["prefetch"] = "yes"; }, "training.prefetch"},
      {[](json& j) { j["training"]["qcomms"] = {{"forward_precision", "fp16"}}; },
       "training.qcomms.forward_precision: must be 'fp32' or 'bf16', got 'fp16'"},
      {[](json& j) { j["training"]["qcomms"] = {{"precision", "bf16"}}; }, "training.qcomms.precision: unknown field"},
      {[](json& j) { j["training"]["qcomms"] = "bf16"; }, "training.qcomms: must be a JSON object"},
      {[](json& j) { j["training"]["steps"] = 0; j["training"]["epochs"] = 0; }, "set steps or epochs"},
      {[](json& j) { j["data"]["source"] = "parquet"; }, "unknown source 'parquet'"},
      {[](json& j) { j["tables"].push_back(j["tables"][0]); }, "two tables are named 't'"},
      {[](json& j) {
         j["tables"].push_back({{"name", "u"}, {"num_embeddings", 5}, {"embedding_dim", 2}, {"feature_names", {"f"}}});
       },
       "feature 'f' is listed by more than one table"},
      {[](json& j) { j["tables"][0]["sharding_type"] = "diagonal"; }, "unknown sharding type"},
      {[](json& j) {
         j["data"] = {{"source", "criteo"}, {"path", "x.tsv"}};
       },
       "C1..C26"},
      {[](json& j) { j["runtime"] = {{"heartbeat_ms", 1000}, {"peer_timeout_ms", 500}}; }, "must exceed"},
      // Found writing the fuzz target: a layer this wide overflowed
      // InteractionWidth (signed overflow), and a server id past an int was
      // cut to another server's.
      {[](json& j) {
         j["model"]["num_dense_features"] = 1;
         j["model"]["bottom_mlp"] = {INT64_MAX};
       },
       "model.bottom_mlp[0]: must be an integer in [1, 1048576]"},
      {[](json& j) { j["tables"][0]["constraints"] = {{"ps", {0, 4294967296}}}; },
       "tables[0].constraints.ps[1]: must be an integer in [0, 1048576]"},
  };
  for (const Case& c : cases) {
    json j = MinimalJob();
    c.edit(j);
    Status st = ParseError(j);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << "got: " << st.message();
  }
}

TEST(JobConfigTest, ResolvesRelativePathsAgainstTheConfigFolder) {
  json j = MinimalJob();
  j["tables"][0]["feature_names"] = {"C1"};
  j["data"] = {{"source", "criteo"}, {"path", "../data/train.tsv"}};
  j["model"]["num_dense_features"] = 13;
  auto c = ParseJobConfigJson(j, "/jobs/configs");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.path, "/jobs/data/train.tsv");
}

TEST(JobConfigTest, MissingDataFallsBackToSyntheticOnlyWhenAsked) {
  json j = MinimalJob();
  j["tables"][0]["feature_names"] = {"C3"};
  j["model"]["num_dense_features"] = 13;
  j["data"] = {{"source", "criteo"}, {"path", "/nonexistent/train.tsv"}, {"num_examples", 500}};
  auto c = ParseJobConfigJson(j, "");
  ASSERT_TRUE(c.ok()) << c.status();
  std::string note;
  EXPECT_EQ(ResolveDataFiles(&*c, &note).code(), StatusCode::kNotFound);
  c->data.fallback_to_synthetic = true;
  ASSERT_TRUE(ResolveDataFiles(&*c, &note).ok());
  EXPECT_EQ(c->data.source, "synthetic");
  EXPECT_EQ(c->data.num_examples, 500);
  EXPECT_NE(note.find("synthetic"), std::string::npos);
}

TEST(JobConfigTest, MissingFileAndBadJson) {
  EXPECT_EQ(LoadJobConfig("/nonexistent/job.json").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseJobConfig("{not json", "").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
