// Held-out evaluation while a job trains (training.eval_every): trainer 0
// evaluates after every eval_every-th step, writes the figures to its metrics
// file, and training is exactly what it is without the evaluations (they read
// rows without creating or changing any). Criteo-format files are written by
// the test, so it needs no ../shared data.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kSteps = 40;
constexpr int kDevRows = 300;

// Criteo TSV lines: label, 13 integers (some empty), 26 categorical hashes;
// C1 and C2 carry the label (often), so the model learns something.
void WriteCriteo(const std::string& path, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream out(path);
  for (int r = 0; r < rows; ++r) {
    const int label = static_cast<int>(rng() % 4 == 0);
    out << label;
    for (int i = 0; i < 13; ++i) {
      out << '\t';
      if (rng() % 7 != 0) out << rng() % 50;
    }
    for (int c = 0; c < 26; ++c) {
      const bool signal = c < 2 && rng() % 3 != 0;
      const uint32_t v = signal ? 1000 + label * 7 + static_cast<uint32_t>(rng() % 3) : rng() % 500;
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", v * 2654435761u);
      out << '\t' << hex;
    }
    out << '\n';
  }
}

json Job(const std::string& dir, int64_t eval_every) {
  json tables = json::array();
  for (int c = 1; c <= 3; ++c) {
    tables.push_back({{"name", "t_C" + std::to_string(c)},
                      {"num_embeddings", 500},
                      {"embedding_dim", 8},
                      {"feature_names", {"C" + std::to_string(c)}}});
  }
  json training = {{"batch_size", 32},
                   {"steps", kSteps},
                   {"consistency", "sync"},
                   {"dense_optimizer", {{"type", "sgd"}, {"lr", 0.1}}},
                   {"sparse_optimizer", {{"type", "adagrad"}, {"lr", 0.1}}},
                   {"seed", 11},
                   {"log_every", 10}};
  if (eval_every > 0) training["eval_every"] = eval_every;
  return json{{"name", "evaluation-test"},
              {"cluster", {{"num_ps", 2}, {"num_trainers", 2}}},
              {"tables", tables},
              {"model", {{"num_dense_features", 13}, {"bottom_mlp", {16, 8}}, {"top_mlp", {16, 1}}}},
              {"data", {{"source", "criteo"}, {"path", dir + "/train.tsv"}, {"eval_path", dir + "/dev.tsv"}}},
              {"training", training},
              {"runtime", {{"heartbeat_ms", 200}, {"peer_timeout_ms", 5000}}}};
}

struct JobRun {
  std::vector<json> lines0, lines1;
  testing::Dump dump;
  json summary;
};

JobRun RunJob(const std::string& name, int64_t eval_every) {
  testing::LocalCluster c(name);
  WriteCriteo(c.dir() + "/train.tsv", 2000, 1);
  WriteCriteo(c.dir() + "/dev.tsv", kDevRows, 2);
  JobRun run;
  Status st = c.StartJob(Job(c.dir(), eval_every), 2, 2,
                         {"--dump_dir", c.dir() + "/dump", "--summary_file", c.dir() + "/summary.json"});
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return run;
  EXPECT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  run.lines0 = c.Metrics(0);
  run.lines1 = c.Metrics(1);
  for (const char* t : {"trainer0", "trainer1"}) EXPECT_EQ(c.Wait(t, milliseconds(20000)), 0) << c.Log(t);
  auto job = ParseJobConfigJson(Job(c.dir(), eval_every), "");
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return run;
  auto dump = testing::ReadDump(c.dir() + "/dump", *job);
  EXPECT_TRUE(dump.ok()) << dump.status();
  if (dump.ok()) run.dump = std::move(*dump);
  std::ifstream summary(c.dir() + "/summary.json");
  run.summary = json::parse(summary, nullptr, false);
  return run;
}

std::vector<double> Losses(const std::vector<json>& lines) {
  std::vector<double> out;
  for (const json& l : lines) {
    if (l.contains("loss")) out.push_back(l["loss"].get<double>());
  }
  return out;
}

TEST(EvaluationTest, TrainerZeroEvaluatesEveryNStepsWithoutChangingTheTraining) {
  const JobRun plain = RunJob("evaluation_plain", 0);
  const JobRun evaluated = RunJob("evaluation_every", 15);
  ASSERT_EQ(Losses(plain.lines0).size(), static_cast<size_t>(kSteps));

  // Evaluations after steps 15 and 30 (step indices 14 and 29); the last
  // step's is the final one, in the summary.
  std::vector<json> evals;
  for (const json& l : evaluated.lines0) {
    if (l.contains("eval")) evals.push_back(l);
  }
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]["step"], 14);
  EXPECT_EQ(evals[1]["step"], 29);
  for (const json& e : evals) {
    EXPECT_EQ(e["eval"]["examples"], kDevRows);
    const double auc = e["eval"]["auc"].get<double>();
    EXPECT_GT(auc, 0.0);
    EXPECT_LT(auc, 1.0);
  }
  EXPECT_NE(evals[0]["eval"]["auc"], evals[1]["eval"]["auc"]);  // the model moved between them
  for (const json& l : evaluated.lines1) EXPECT_FALSE(l.contains("eval")) << "trainer 1 evaluated: " << l;

  // The same training, bit for bit: losses of both trainers, every row and
  // the dense model, and the final evaluation.
  EXPECT_EQ(Losses(evaluated.lines0), Losses(plain.lines0));
  EXPECT_EQ(Losses(evaluated.lines1), Losses(plain.lines1));
  std::string where;
  EXPECT_EQ(testing::MaxDifference(plain.dump, evaluated.dump, &where), 0.0) << where;
  ASSERT_TRUE(plain.summary.contains("eval")) << plain.summary.dump();
  EXPECT_EQ(evaluated.summary["eval"], plain.summary["eval"]);
}

}  // namespace
}  // namespace tessera
