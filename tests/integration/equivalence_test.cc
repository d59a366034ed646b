// Distributed equals local (DESIGN.md §4, sync mode): 2 trainers with batch B
// on real processes reach the same parameters after K steps as the
// single-process reference with batch 2B on the same examples — every
// embedding row and every dense weight within 1e-5. So does one trainer in
// async mode, against the reference with batch B.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/job_config.h"
#include "common/param_file.h"
#include "tests/integration/local_cluster.h"
#include "tests/reference/reference_trainer.h"
#include "trainer/dlrm_model.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int kSteps = 12;
constexpr int kBatch = 8;  // per trainer

// Four tables of different sizes and dims (5 divides by neither 2 nor 3; 97
// rows neither), SUM, MEAN and unpooled (NONE) lookups, one table serving two
// features, weighted ids, three optimizers.
json JobConfigJson(const std::string& sharding, int num_ps, int trainers, int batch) {
  auto table = [&](const std::string& name, int rows, int dim, const std::string& pooling, json optimizer,
                   std::vector<std::string> features = {}) {
    if (features.empty()) features = {name + "_f"};
    json t = {{"name", name},        {"num_embeddings", rows}, {"embedding_dim", dim},
              {"feature_names", features}, {"pooling", pooling}, {"optimizer", optimizer},
              {"initializer", {{"type", "uniform"}, {"low", -0.1}, {"high", 0.1}}}};
    if (!sharding.empty() && sharding != "auto") t["sharding_type"] = sharding;
    return t;
  };
  const bool columns = sharding == "column_wise";
  return json{
      {"name", "equivalence"},
      {"cluster", {{"num_ps", num_ps}, {"num_trainers", trainers}}},
      {"tables",
       {table("big", 97, 5, "SUM", {{"type", "sgd"}, {"lr", 0.3}}),
        table("mid", 60, 8, "MEAN", {{"type", "adagrad"}, {"lr", 0.2}, {"initial_accumulator", 0.1}},
              {"mid_f", "mid_g"}),
        table("seq", 41, 4, "NONE", {{"type", "sgd"}, {"lr", 0.25}}),
        // Row-wise Adagrad keeps one accumulator per row, which a column
        // shard cannot (TorchRec has the same limit): plain SGD there.
        table("small", 33, 3, "SUM",
              columns ? json{{"type", "sgd"}, {"lr", 0.2}}
                      : json{{"type", "rowwise_adagrad"}, {"lr", 0.2}, {"initial_accumulator", 0.1}})}},
      {"model", {{"num_dense_features", 4}, {"bottom_mlp", {6, 4}}, {"top_mlp", {8, 1}}}},
      {"data",
       {{"source", "synthetic"}, {"num_examples", 200}, {"ids_per_bag", 3}, {"zipf", 0.8}, {"weighted", true}}},
      {"training",
       {{"batch_size", batch},
        {"steps", kSteps},
        {"dense_optimizer", {{"type", "sgd"}, {"lr", 0.2}}},
        {"consistency", "sync"},
        {"seed", 11},
        {"log_every", 4}}},
      {"runtime", {{"heartbeat_ms", 200}, {"peer_timeout_ms", 10000}}}};
}

struct Dumped {
  std::map<std::string, std::map<int64_t, std::vector<float>>> rows;  // table -> row -> full-width weights
};

struct Case {
  std::string sharding;
  int num_ps = 1;
  // Servers keep rows in RocksDB under a host budget a tenth of the tables.
  bool tiered = false;
  // When > 0, servers put a GPU tier of this many rows a shard above that
  // (with its rows in host memory: the tier's logic, run where there is no
  // GPU). Fewer rows than the larger shards, so rows are evicted and fetched
  // back; enough for the distinct rows of one request to a shard.
  int gpu_tier_rows = 0;
  // training.row_replies: "always" has every pooled lookup come back as
  // distinct rows, pooled by the trainers.
  std::string row_replies = "auto";
  // training.prefetch: step t+1's lookups leave before step t is pushed and
  // wait at the servers for its update.
  bool prefetch = false;
  // training.allreduce_bucket_bytes: the dense gradients allreduced in
  // buckets while the backward pass runs, the push leaving before the
  // weights' gradients are computed.
  int64_t allreduce_bucket_bytes = 0;
  // One trainer in async mode sees every update of its own before its next
  // lookup, so it equals the one-process reference too: with prefetch, the
  // servers park its lookup of step t+1 until its push of step t is applied.
  int trainers = 2;
  std::string consistency = "sync";
};

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTest, TwoTrainersEqualOneProcessWithTheConcatenatedBatch) {
  const Case c = GetParam();
  const std::string& sharding = c.sharding;
  const int num_ps = c.num_ps;
  const int trainers = c.trainers;
  json config = JobConfigJson(sharding, num_ps, trainers, kBatch);
  config["training"]["consistency"] = c.consistency;
  config["training"]["row_replies"] = c.row_replies;
  config["training"]["prefetch"] = c.prefetch;
  config["training"]["allreduce_bucket_bytes"] = c.allreduce_bucket_bytes;
  testing::LocalCluster cluster("equivalence_" + sharding);
  const std::string dump = cluster.dir() + "/dump";
  std::vector<std::string> ps_args;
  if (c.tiered) {
    // The tables hold about 7 KB of rows and state: 700 bytes keeps a few rows
    // in memory and the rest in RocksDB, evicted and promoted all run long;
    // write-back buffers of a few rows hand them to RocksDB all run long too.
    ps_args = {"--rocksdb_path", cluster.dir() + "/rocks{i}", "--host_bytes", "700", "--write_back_bytes", "400"};
  }
  if (c.gpu_tier_rows > 0) {
    // --gpu_bytes is too small for any shard: every shard gets the floor.
    for (const std::string& a : {std::string("--gpu_tier_on_host"), std::string("--gpu_bytes"), std::string("100"),
                                 std::string("--gpu_tier_min_rows"), std::to_string(c.gpu_tier_rows)}) {
      ps_args.push_back(a);
    }
  }
  ASSERT_TRUE(cluster.StartJob(config, num_ps, trainers, {"--dump_dir", dump}, ps_args).ok());
  const int code = cluster.Wait("master", milliseconds(90000));
  ASSERT_EQ(code, 0) << cluster.Log("master") << cluster.Log("trainer0") << cluster.Log("ps0");
  for (int t = 0; t < trainers; ++t) {
    const std::string p = "trainer" + std::to_string(t);
    EXPECT_EQ(cluster.Wait(p, milliseconds(10000)), 0) << cluster.Log(p);
  }

  auto job = ParseJobConfigJson(config, "");
  ASSERT_TRUE(job.ok()) << job.status();
  auto initial = TrainReference(*job, trainers * kBatch, 0);
  auto reference = TrainReference(*job, trainers * kBatch, kSteps);
  ASSERT_TRUE(reference.ok()) << reference.status();

  // Gather the dumped rows of every shard, column slices side by side.
  Dumped d;
  for (const auto& entry : std::filesystem::directory_iterator(dump)) {
    if (entry.path().filename().string().rfind("shard", 0) != 0) continue;
    auto arrays = ReadParamFile(entry.path().string());
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    const json meta = json::parse(FindParam(*arrays, "meta")->bytes);
    const std::string table = meta["table"];
    const int col_offset = meta["col_offset"], num_cols = meta["num_cols"], width = meta["row_width"];
    int t = 0;
    while (job->tables[t].name != table) ++t;
    const ParamArray* ids = FindParam(*arrays, "ids");
    const ParamArray* rows = FindParam(*arrays, "rows");
    for (size_t i = 0; i < ids->i64.size(); ++i) {
      auto& row = d.rows[table][ids->i64[i]];
      row.resize(job->tables[t].embedding_dim, NAN);
      for (int c = 0; c < num_cols; ++c) row[col_offset + c] = rows->f32[i * width + c];
    }
  }

  // Data-parallel tables live on the trainers: trainer 0 dumps them whole.
  if (std::filesystem::exists(dump + "/dp.params")) {
    auto dp = ReadParamFile(dump + "/dp.params");
    ASSERT_TRUE(dp.ok()) << dp.status();
    for (const ParamArray& a : *dp) {
      const std::string table = a.name.substr(3, a.name.size() - 3 - 5);  // "dp.<table>.rows"
      int t = 0;
      while (job->tables[t].name != table) ++t;
      const int dim = job->tables[t].embedding_dim;
      for (int64_t row = 0; row < a.rows; ++row) {
        d.rows[table][row].assign(a.f32.begin() + row * a.cols, a.f32.begin() + row * a.cols + dim);
      }
    }
  }

  double max_diff = 0;
  int64_t rows_compared = 0, rows_trained = 0;
  for (size_t t = 0; t < job->tables.size(); ++t) {
    const TableConfig& tc = job->tables[t];
    const int width = reference->row_width[t];
    for (int64_t row = 0; row < tc.num_embeddings; ++row) {
      const float* ref = &reference->tables[t][row * width];
      const float* init = &initial->tables[t][row * width];
      auto it = d.rows[tc.name].find(row);
      for (int c = 0; c < tc.embedding_dim; ++c) {
        // A row no server stored was never updated: it must still be initial.
        const float got = it == d.rows[tc.name].end() ? init[c] : it->second[c];
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(got - ref[c])));
        ASSERT_NEAR(got, ref[c], 1e-5) << "table " << tc.name << " row " << row << " col " << c;
      }
      ++rows_compared;
      rows_trained += it != d.rows[tc.name].end();
    }
  }
  EXPECT_GT(rows_trained, 50);  // the comparison covers trained rows, not just initial ones

  auto dense = ReadParamFile(dump + "/dense.params");
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::vector<int> dims = {5, 8, 8, 4, 3};
  DlrmModel layout(job->model, dims, job->training.seed);
  int64_t dense_compared = 0;
  for (const auto& info : layout.ParamInfos()) {
    const ParamArray* a = FindParam(*dense, info.name);
    ASSERT_NE(a, nullptr) << info.name;
    for (int64_t k = 0; k < info.rows * info.cols; ++k) {
      const float ref = reference->dense[info.offset + k];
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a->f32[k] - ref)));
      ASSERT_NEAR(a->f32[k], ref, 1e-5) << info.name << "[" << k << "]";
      ++dense_compared;
    }
  }
  EXPECT_EQ(dense_compared, layout.num_params());
  // The run must have moved the parameters: equality to the start would pass trivially.
  double moved = 0;
  for (size_t k = 0; k < reference->dense.size(); ++k) {
    moved = std::max(moved, static_cast<double>(std::fabs(reference->dense[k] - layout.params()[k])));
  }
  EXPECT_GT(moved, 1e-3);
  if (c.tiered || c.gpu_tier_rows > 0) {
    // The run must really have gone through RocksDB, and through the GPU tier.
    const json summary = json::parse(std::ifstream(cluster.dir() + "/summary.json"));
    int64_t evictions = 0, gpu_evictions = 0, rocksdb_reads = 0;
    for (const json& ps : summary["parameter_servers"]) {
      for (const json& shard : ps["shards"]) {
        rocksdb_reads += shard["rocksdb_rows_read"].get<int64_t>();
        for (const json& tier : shard["tiers"]) {
          evictions += tier["evictions"].get<int64_t>();
          if (tier.value("tier", std::string()) == "gpu") gpu_evictions += tier["evictions"].get<int64_t>();
        }
      }
    }
    if (c.tiered) {
      EXPECT_GT(evictions - gpu_evictions, 100);
      EXPECT_GT(rocksdb_reads, 100);
    }
    if (c.gpu_tier_rows > 0) {
      EXPECT_GT(gpu_evictions, 20);
    }
    std::cout << "tiers: " << evictions - gpu_evictions << " host evictions, " << gpu_evictions
              << " GPU-tier evictions, " << rocksdb_reads << " RocksDB row reads\n";
  }
  std::cout << "sharding " << sharding << " on " << num_ps
            << " servers: max |distributed - reference| = " << max_diff << " over " << rows_compared << " rows ("
            << rows_trained << " trained) and " << dense_compared << " dense weights\n";
}

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const char* type : {"table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"}) {
    for (int ps = 1; ps <= 3; ++ps) out.push_back({type, ps, false});
  }
  out.push_back({"auto", 3, false});  // whatever the planner picks
  // Tables 10x the host budget train to the same parameters.
  out.push_back({"table_wise", 2, true});
  out.push_back({"row_wise", 2, true});
  // A GPU tier smaller than the tables, over host memory and over RocksDB.
  // Row shards of at most 49 rows; one request touches at most 30 of one.
  out.push_back({"row_wise", 2, false, 30});
  // "mid" serves two features: up to 48 distinct rows in one request.
  out.push_back({"table_wise", 2, true, 48});
  // Rows pooled by the trainers, for every pooled lookup.
  for (const char* type : {"row_wise", "column_wise", "table_row_wise"}) out.push_back({type, 2, false, 0, "always"});
  out.push_back({"table_wise", 2, true, 48, "always"});
  // Lookups sent a step ahead, which the servers answer once the step
  // before is applied: exact, over memory, RocksDB and a GPU tier.
  out.push_back({"row_wise", 3, false, 0, "auto", true});
  out.push_back({"table_wise", 2, true, 48, "auto", true});
  out.push_back({"column_wise", 2, false, 0, "always", true});
  // Dense gradients in buckets of 64 bytes (many per step, of every layer),
  // with and without prefetch.
  out.push_back({"row_wise", 2, false, 0, "auto", false, 64});
  out.push_back({"table_wise", 2, true, 48, "auto", true, 64});
  // One trainer in async mode, with and without prefetch (whose lookups wait
  // at the servers for the trainer's own push of the step before), over
  // memory, and over RocksDB and a GPU tier.
  out.push_back({"row_wise", 2, false, 0, "auto", false, 0, 1, "async"});
  out.push_back({"row_wise", 2, false, 0, "auto", true, 0, 1, "async"});
  out.push_back({"table_wise", 2, true, 48, "auto", true, 0, 1, "async"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Sharding, EquivalenceTest, ::testing::ValuesIn(AllCases()), [](const auto& info) {
  return info.param.sharding + "_" + std::to_string(info.param.num_ps) + "ps" + (info.param.tiered ? "_tiered" : "") +
         (info.param.gpu_tier_rows > 0 ? "_gpu_tier_on_host" : "") +
         (info.param.row_replies != "auto" ? "_rows_" + info.param.row_replies : "") +
         (info.param.prefetch ? "_prefetch" : "") +
         (info.param.allreduce_bucket_bytes > 0 ? "_buckets" : "") +
         (info.param.trainers != 2 ? "_" + std::to_string(info.param.trainers) + "trainer" : "") +
         (info.param.consistency != "sync" ? "_" + info.param.consistency : "");
});

}  // namespace
}  // namespace tessera
