// The shipped configs for public data sets train: a short job on each of
// configs/avazu.json and configs/movielens.json (CSV source) with 1 server
// and 1 trainer, whose loss falls and whose evaluation beats chance. Skipped,
// visibly, where ../shared/data is absent (a fresh clone).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/json_fields.h"
#include "tests/integration/local_cluster.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;

// The checkout's root, from this file's path (CMake gives it absolute).
fs::path SourceRoot() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

// configs/<name> with its data paths made absolute (the cluster writes the
// job to its own folder), `steps` steps, and quick failure detection.
json LoadShippedConfig(const std::string& name, int64_t steps) {
  const fs::path configs = SourceRoot() / "configs";
  std::ifstream in(configs / name);
  std::stringstream text;
  text << in.rdbuf();
  json j;
  EXPECT_TRUE(ParseJson(text.str(), &j, /*allow_comments=*/true).ok()) << name;
  for (const char* key : {"path", "eval_path"}) {
    if (j["data"].contains(key)) j["data"][key] = (configs / j["data"][key].get<std::string>()).lexically_normal();
  }
  j["training"]["steps"] = steps;
  j["training"]["log_every"] = 10;
  j["runtime"] = {{"heartbeat_ms", 200}, {"peer_timeout_ms", 5000}};
  return j;
}

double MeanLoss(const std::vector<json>& m, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += m[i]["loss"].get<double>();
  return sum / static_cast<double>(end - begin);
}

struct Workload {
  const char* config;
  const char* data;  // relative to ../shared/data
  int64_t steps;
};

class PublicWorkloadTest : public ::testing::TestWithParam<Workload> {};

TEST_P(PublicWorkloadTest, TrainsAndBeatsChance) {
  const Workload& w = GetParam();
  const fs::path data = SourceRoot().parent_path() / "shared" / "data" / w.data;
  if (!fs::exists(data)) GTEST_SKIP() << data << " is absent (no ../shared/data, as in a fresh clone)";

  testing::LocalCluster cluster(std::string("public_") + fs::path(w.config).stem().string());
  ASSERT_TRUE(cluster.StartJob(LoadShippedConfig(w.config, w.steps), 1, 1).ok());
  ASSERT_EQ(cluster.Wait("master", milliseconds(60000)), 0) << cluster.Log("master") << cluster.Log("trainer0");
  for (const char* p : {"ps0", "trainer0"}) EXPECT_EQ(cluster.Wait(p, milliseconds(10000)), 0) << cluster.Log(p);

  const std::vector<json> m = cluster.Metrics(0);
  ASSERT_EQ(m.size(), static_cast<size_t>(w.steps));
  const double first = MeanLoss(m, 0, 10), last = MeanLoss(m, m.size() - 10, m.size());
  const json summary = json::parse(std::ifstream(cluster.dir() + "/summary.json"));
  ASSERT_TRUE(summary.contains("eval")) << summary.dump();
  const double auc = summary["eval"]["auc"].get<double>();
  std::cout << w.config << ": " << w.steps << " steps, loss " << first << " -> " << last << ", eval AUC " << auc
            << " on " << summary["eval"]["examples"] << " examples\n";
  EXPECT_LT(last, first);
  EXPECT_GT(auc, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Configs, PublicWorkloadTest,
                         ::testing::Values(Workload{"avazu.json", "avazu_9k/train.csv", 50},
                                           Workload{"movielens.json", "movielens_100k/u.data", 50}),
                         [](const auto& info) { return fs::path(info.param.config).stem().string(); });

}  // namespace
}  // namespace tessera
