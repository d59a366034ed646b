#include "master/config_check.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace tessera
