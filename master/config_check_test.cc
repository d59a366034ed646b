#include "master/config_check.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/job_config.h"

namespace tessera {
namespace {

using nlohmann::json;

class ConfigCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera_config_check_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static json Valid() {
    return json{{"name", "check"},
                {"tables",
                 {{{"name", "a"}, {"num_embeddings", 100}, {"embedding_dim", 8}, {"feature_names", {"fa"}}},
                  {{"name", "b"}, {"num_embeddings", 50}, {"embedding_dim", 4}, {"feature_names", {"fb"}}}}},
                {"model", {{"top_mlp", {8, 1}}}},
                {"data", {{"source", "synthetic"}, {"num_examples", 100}}},
                {"training", {{"batch_size", 8}, {"steps", 10}}}};
  }
  // Runs the check on `config` written to a file: (exit code, output).
  std::pair<int, std::string> Check(const std::string& text, int num_ps = 2) {
    const std::string path = (dir_ / "job.json").string();
    std::ofstream(path) << text;
    std::ostringstream out;
    const int code = CheckConfigMain(path, num_ps, 0, out);
    return {code, out.str()};
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigCheckTest, AValidConfigPrintsWhatTheJobWouldCreate) {
  auto [code, out] = Check(Valid().dump());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("valid. Job 'check': 2 table(s), 2 feature(s), 150 rows"), std::string::npos) << out;
  EXPECT_NE(out.find("Sharding plan v1 over 2 parameter server(s)"), std::string::npos) << out;
}

TEST_F(ConfigCheckTest, EveryMistakeIsListedAtOnceWithItsKeyPath) {
  json j = Valid();
  j["training"]["batch_size"] = -1;          // training
  j["tables"][0]["embedding_dim"] = "wide";  // table a
  j["tables"][1]["pooling"] = "MAX";         // table b
  j["runtime"] = {{"heartbeat_ms", 1}};      // runtime
  j["checkpoint"] = {{"every_steps", 5}};    // checkpoint: no dir
  j["colour"] = "blue";                      // an unknown key
  auto [code, out] = Check(j.dump());
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("6 errors in "), std::string::npos) << out;
  for (const char* path : {"training.batch_size", "embedding_dim", "pooling", "runtime.heartbeat_ms", "checkpoint.dir",
                           "colour"}) {
    EXPECT_NE(out.find(path), std::string::npos) << path << " missing from:\n" << out;
  }
}

TEST_F(ConfigCheckTest, SeveralMistakesInOneSectionAreAllListed) {
  json j = Valid();
  j["training"]["batch_size"] = 0;             // out of range
  j["training"]["seed"] = "five";              // wrong type
  j["training"]["log_evry"] = 10;              // a typo: unknown
  j["training"]["warmup"] = 3;                 // unknown too
  j["tables"][0]["embedding_dim"] = -4;        // table a, twice
  j["tables"][0]["num_embeddings"] = "many";
  auto [code, out] = Check(j.dump());
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("6 errors in "), std::string::npos) << out;
  for (const char* path : {"training.batch_size", "training.seed", "training.log_evry", "training.warmup",
                           "embedding_dim", "num_embeddings"}) {
    EXPECT_NE(out.find(path), std::string::npos) << path << " missing from:\n" << out;
  }
  // A real parse still stops at the first.
  auto parsed = ParseJobConfigJson(j, "");
  ASSERT_FALSE(parsed.ok());
}

TEST_F(ConfigCheckTest, BrokenJsonAMissingFileAndMissingDataAreErrorsToo) {
  auto [code, out] = Check("{\"name\": ");
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("1 error in"), std::string::npos) << out;

  std::ostringstream missing;
  EXPECT_EQ(CheckConfigMain((dir_ / "absent.json").string(), 0, 0, missing), 1);
  EXPECT_NE(missing.str().find("cannot read job config"), std::string::npos) << missing.str();

  json j = Valid();
  j["data"] = {{"source", "criteo"}, {"path", "no_such_file.tsv"}};
  j["tables"][0]["feature_names"] = {"C1"};
  j["tables"][1]["feature_names"] = {"C2"};
  auto [data_code, data_out] = Check(j.dump());
  EXPECT_EQ(data_code, 1);
  EXPECT_NE(data_out.find("no_such_file.tsv"), std::string::npos) << data_out;
}

// The configs shipped in configs/ (found from this file's path, which CMake
// gives absolute). Avazu and MovieLens read ../shared/data: where it is absent
// (a fresh clone) their only error must be the missing file.
TEST_F(ConfigCheckTest, TheShippedPublicWorkloadConfigsAreValid) {
  const std::filesystem::path configs = std::filesystem::path(__FILE__).parent_path().parent_path() / "configs";
  for (const char* name : {"criteo_1tb.json", "avazu.json", "movielens.json", "criteo_dlrm.json"}) {
    std::ostringstream out;
    const int code = CheckConfigMain((configs / name).string(), 2, 0, out);
    if (code != 0 && out.str().find("1 error in") != std::string::npos &&
        out.str().find("does not exist") != std::string::npos &&
        !std::filesystem::exists(configs.parent_path().parent_path() / "shared" / "data")) {
      std::cout << name << ": its data is absent (no ../shared/data); only that was wrong\n";
      continue;
    }
    EXPECT_EQ(code, 0) << name << ":\n" << out.str();
    EXPECT_NE(out.str().find("Sharding plan v1 over 2 parameter server(s)"), std::string::npos) << out.str();
  }
  std::ostringstream out;
  ASSERT_EQ(CheckConfigMain((configs / "criteo_1tb.json").string(), 2, 0, out), 0) << out.str();
  EXPECT_NE(out.str().find("26 table(s), 26 feature(s), 187767399 rows"), std::string::npos) << out.str();
}

json CsvJob(const std::string& path) {
  return json{{"name", "csv"},
              {"tables",
               {{{"name", "users"}, {"num_embeddings", 100}, {"embedding_dim", 8}, {"feature_names", {"user"}}},
                {{"name", "items"}, {"num_embeddings", 50}, {"embedding_dim", 8}, {"feature_names", {"item"}}}}},
              {"model", {{"num_dense_features", 1}, {"top_mlp", {8, 1}}}},
              {"data",
               {{"source", "csv"},
                {"path", path},
                {"delimiter", "\t"},
                {"header", false},
                {"columns", {"user", "item", "rating", "time"}},
                {"label", {{"column", "rating"}, {"threshold", 4}}},
                {"dense", {{{"column", "time"}, {"log1p", true}}}},
                {"sparse", {"user", "item"}},
                {"eval_fraction", 0.1}}},
              {"training", {{"batch_size", 8}, {"steps", 10}}}};
}

TEST_F(ConfigCheckTest, CsvMistakesNameTheirKeyPath) {
  const std::string data = (dir_ / "u.data").string();
  std::ofstream(data) << "1\t2\t4\t100\n";
  {
    auto [code, out] = Check(CsvJob(data).dump());
    EXPECT_EQ(code, 0) << out;
    EXPECT_NE(out.find("data: csv"), std::string::npos) << out;
  }
  // Each edit of a valid config, and the key path its error must name.
  const std::vector<std::pair<std::function<void(json*)>, std::string>> cases = {
      {[](json* j) { (*j)["data"].erase("label"); }, "data.label: "},
      {[](json* j) { (*j)["data"]["label"] = {{"threshold", 4}}; }, "data.label.column"},
      {[](json* j) { (*j)["data"]["label"]["column"] = "stars"; }, "data.label.column: column 'stars' is not among"},
      {[](json* j) { (*j)["data"]["sparse"] = {"user", "rating"}; }, "data.sparse[1]: column 'rating' is the label"},
      {[](json* j) { (*j)["data"]["sparse"] = {"user"}; }, "feature 'item': not among data.sparse"},
      {[](json* j) { (*j)["data"]["dense"] = json::array(); }, "model.num_dense_features: must equal the 0"},
      {[](json* j) { (*j)["data"]["dense"] = {{{"column", "time"}, {"log", true}}}; }, "data.dense[0]"},
      {[](json* j) { (*j)["data"].erase("columns"); }, "data.columns: required when a file has no header"},
      {[](json* j) { (*j)["data"]["delimiter"] = "::"; }, "data.delimiter: must be one character"},
      {[](json* j) { (*j)["data"]["eval_fraction"] = 1.5; }, "data.eval_fraction: must be in [0, 1)"},
      {[](json* j) { (*j)["data"]["eval_path"] = "dev.tsv"; }, "data.eval_fraction: give data.eval_path or"},
      {[](json* j) { (*j)["data"]["source"] = "criteo"; }, "data.delimiter: only for data.source 'csv'"},
      {[](json* j) { (*j)["data"]["path"] = "absent.tsv"; }, "absent.tsv does not exist"},
  };
  for (const auto& [edit, needle] : cases) {
    json j = CsvJob(data);
    edit(&j);
    auto [code, out] = Check(j.dump());
    EXPECT_EQ(code, 1) << needle;
    EXPECT_NE(out.find(needle), std::string::npos) << "'" << needle << "' missing from:\n" << out;
  }
}

// The master hands trainers the job as ToJson; a CSV job must survive it.
TEST_F(ConfigCheckTest, ACsvJobSurvivesTheTripToTheTrainers) {
  auto job = ParseJobConfigJson(CsvJob("/data/u.data"), "");
  ASSERT_TRUE(job.ok()) << job.status();
  auto back = ParseJobConfigJson(job->ToJson(), "");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << job->ToJson().dump(2);
  const CsvDataConfig& a = job->data.csv;
  const CsvDataConfig& b = back->data.csv;
  EXPECT_EQ(b.delimiter, '\t');
  EXPECT_EQ(std::tie(a.header, a.eval_header, a.columns, a.label_column, a.has_label_threshold, a.label_threshold,
                     a.sparse, a.eval_fraction),
            std::tie(b.header, b.eval_header, b.columns, b.label_column, b.has_label_threshold, b.label_threshold,
                     b.sparse, b.eval_fraction));
  ASSERT_EQ(b.dense.size(), 1u);
  EXPECT_EQ(b.dense[0].column, "time");
  EXPECT_TRUE(b.dense[0].log1p);
  EXPECT_EQ(back->ToJson(), job->ToJson());
}

TEST_F(ConfigCheckTest, AMissingCsvFileFallsBackToSyntheticOnlyWhenAsked) {
  json j = CsvJob((dir_ / "absent.tsv").string());
  j["data"]["fallback_to_synthetic"] = true;
  auto [code, out] = Check(j.dump());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("note: CSV data not found at"), std::string::npos) << out;
  EXPECT_NE(out.find("data: synthetic"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
