// Whole jobs on loopback: the loss falls; a trainer killed mid-run ends the
// job with a clear error and a non-zero exit instead of a hang.
#include <gtest/gtest.h>

#include <signal.h>

#include <map>
#include <thread>

#include "common/job_config.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/test_jobs.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

json SyntheticJob(int64_t steps, int num_ps, int trainers) {
  auto table = [](const std::string& name, int rows, int dim) {
    return json{{"name", name}, {"num_embeddings", rows}, {"embedding_dim", dim}, {"feature_names", {name}}};
  };
  return json{{"name", "training-test"},
              {"cluster", {{"num_ps", num_ps}, {"num_trainers", trainers}}},
              {"tables", {table("users", 5000, 16), table("items", 2000, 8), table("ctx", 100, 4)}},
              {"model", {{"num_dense_features", 4}, {"bottom_mlp", {16, 8}}, {"top_mlp", {32, 1}}}},
              {"data",
               {{"source", "synthetic"}, {"num_examples", 50000}, {"ids_per_bag", 4}, {"zipf", 1.05},
                {"labels", "learnable"}}},
              {"training",
               {{"batch_size", 128},
                {"steps", steps},
                {"dense_optimizer", {{"type", "sgd"}, {"lr", 0.2}}},
                {"sparse_optimizer", {{"type", "adagrad"}, {"lr", 0.1}}},
                {"seed", 3},
                {"log_every", 20}}},
              {"runtime", {{"heartbeat_ms", 200}, {"peer_timeout_ms", 2000}}}};
}

double MeanLoss(const std::vector<json>& m, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += m[i]["loss"].get<double>();
  return sum / static_cast<double>(end - begin);
}

// Every consistency mode learns: sync, async, and async with the next step's
// lookups prefetched (which wait at the servers for the trainer's own push).
class LossFallsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LossFallsTest, WithTwoServersAndTwoTrainers) {
  testing::LocalCluster cluster("loss_falls_" + GetParam());
  json job = SyntheticJob(300, 2, 2);
  job["training"]["consistency"] = GetParam() == "sync" ? "sync" : "async";
  job["training"]["prefetch"] = GetParam() == "async_prefetch";
  ASSERT_TRUE(cluster.StartJob(job, 2, 2).ok());
  ASSERT_EQ(cluster.Wait("master", milliseconds(120000)), 0) << cluster.Log("master") << cluster.Log("trainer0");
  for (const char* p : {"ps0", "ps1", "trainer0", "trainer1"}) {
    EXPECT_EQ(cluster.Wait(p, milliseconds(10000)), 0) << p << ":\n" << cluster.Log(p);
  }
  for (int r = 0; r < 2; ++r) {
    const auto m = cluster.Metrics(r);
    ASSERT_EQ(m.size(), 300u);
    EXPECT_EQ(m[0]["step"], 0);
    EXPECT_GT(m[0]["examples_per_s"].get<double>(), 0);
    const double first = MeanLoss(m, 0, 10), last = MeanLoss(m, 280, 300);
    std::cout << "trainer " << r << ": loss " << first << " -> " << last << "\n";
    EXPECT_LT(last, 0.75 * first) << "trainer " << r;
  }
  EXPECT_NE(cluster.Log("master").find("[master] step"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Modes, LossFallsTest, ::testing::Values("sync", "async", "async_prefetch"),
                         [](const auto& info) { return info.param; });

// A lost trainer that is not to be recovered from (runtime.recover_lost_trainers
// false), or whose replacement never comes, ends the job with an error that
// names it.
class KilledTrainerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledTrainerTest, EndsTheJobWithAClearError) {
  testing::LocalCluster cluster("kill_trainer_" + GetParam());
  json job = SyntheticJob(1000000, 1, 2);
  if (GetParam() == "not_recovered") {
    job["runtime"]["recover_lost_trainers"] = false;
  } else {
    job["runtime"]["trainer_replacement_wait_ms"] = 1500;
  }
  ASSERT_TRUE(cluster.StartJob(job, 1, 2).ok());
  // Let it train a little.
  for (int i = 0; i < 600 && cluster.Metrics(0).size() < 20; ++i) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_GE(cluster.Metrics(0).size(), 20u) << cluster.Log("master") << cluster.Log("trainer0");
  cluster.Kill("trainer1", SIGKILL);

  const int code = cluster.Wait("master", milliseconds(20000));
  ASSERT_NE(code, -1) << "the master hangs after a trainer died:\n" << cluster.Log("master");
  EXPECT_EQ(code, 1);
  const std::string log = cluster.Log("master");
  EXPECT_NE(log.find("JOB FAILED"), std::string::npos) << log;
  // The reason names the dead trainer, not the survivor whose allreduce broke.
  EXPECT_NE(log.find("JOB FAILED: UNAVAILABLE: trainer 1 (host"), std::string::npos) << log;
  EXPECT_NE(log.find("died or hangs"), std::string::npos) << log;
  if (GetParam() == "no_replacement") {
    EXPECT_NE(log.find("no replacement trainer 1 registered within"), std::string::npos) << log;
  }
  // Nobody is left behind: the server and the surviving trainer end too.
  EXPECT_NE(cluster.Wait("trainer0", milliseconds(15000)), -1) << cluster.Log("trainer0");
  EXPECT_NE(cluster.Wait("trainer0", milliseconds(0)), 0);
  EXPECT_NE(cluster.Wait("ps0", milliseconds(15000)), -1) << cluster.Log("ps0");
}

INSTANTIATE_TEST_SUITE_P(Recovery, KilledTrainerTest, ::testing::Values("not_recovered", "no_replacement"),
                         [](const auto& info) { return info.param; });

// A one-hot sync job (hot ids: fewer distinct ids than bags, so `auto`
// asks for distinct rows and pools on the trainers) ends with the same
// parameters and losses, bit for bit, as with rows pooled by the servers.
TEST(TrainingTest, RowRepliesEndTheSyncJobBitForBitAsPooledReplies) {
  nlohmann::json job = testing::StatefulSyncJob("row-replies", "", 60, 0);
  job["cluster"] = {{"num_ps", 2}, {"num_trainers", 2}};
  job["data"]["ids_per_bag"] = 1;
  job["data"]["zipf"] = 1.2;
  job["training"]["batch_size"] = 32;
  struct Run {
    testing::Dump dump;
    std::vector<double> losses;
  };
  std::map<std::string, Run> runs;
  for (const char* replies : {"never", "auto"}) {
    SCOPED_TRACE(replies);
    job["training"]["row_replies"] = replies;
    testing::LocalCluster c(std::string("row_replies_") + replies);
    ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
    ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
    for (const char* t : {"trainer0", "trainer1"}) ASSERT_EQ(c.Wait(t, milliseconds(20000)), 0) << c.Log(t);
    auto parsed = ParseJobConfigJson(job, "");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto dump = testing::ReadDump(c.dir() + "/dump", *parsed);
    ASSERT_TRUE(dump.ok()) << dump.status();
    Run& run = runs[replies];
    run.dump = std::move(*dump);
    for (int r = 0; r < 2; ++r) {
      for (const nlohmann::json& m : c.Metrics(r)) run.losses.push_back(m.at("loss").get<double>());
    }
  }
  ASSERT_FALSE(runs["never"].dump.rows.empty());
  std::string where;
  EXPECT_EQ(testing::MaxDifference(runs["never"].dump, runs["auto"].dump, &where), 0.0) << where;
  EXPECT_EQ(runs["never"].losses.size(), 120u);
  EXPECT_EQ(runs["auto"].losses, runs["never"].losses);
}

// training.qcomms: rows and gradients as bfloat16 halve the values' bytes of
// every lookup reply, and the job learns as the float32 one does, though
// not bit for bit (each value rounded where it is sent).
TEST(TrainingTest, Bf16CommsHalveTheRepliesAndTheJobLearnsAsWithFp32) {
  std::map<std::string, std::vector<json>> metrics;  // trainer 0's, per precision
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    json job = SyntheticJob(300, 2, 2);
    job["training"]["qcomms"] = {{"forward_precision", precision}, {"backward_precision", precision}};
    // Pooled replies in both: row replies' break-even moves with the
    // values' width, and with it which entries would come back as rows.
    job["training"]["row_replies"] = "never";
    testing::LocalCluster c(std::string("qcomms_") + precision);
    ASSERT_TRUE(c.StartJob(job, 2, 2).ok());
    ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
    for (const char* p : {"ps0", "ps1", "trainer0", "trainer1"}) {
      EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << p << ":\n" << c.Log(p);
    }
    metrics[precision] = c.Metrics(0);
    ASSERT_EQ(metrics[precision].size(), 300u);
  }
  const auto& fp32 = metrics["fp32"];
  const auto& bf16 = metrics["bf16"];
  bool differs = false;
  for (size_t s = 0; s < fp32.size(); ++s) {
    // The same batches take the same routes: only the values' width changed.
    const int64_t wide = fp32[s].at("lookup_bytes_received").get<int64_t>();
    ASSERT_GT(wide, 0);
    EXPECT_EQ(bf16[s].at("lookup_bytes_received").get<int64_t>() * 2, wide) << "step " << s;
    EXPECT_EQ(bf16[s].at("lookup_bytes_sent"), fp32[s].at("lookup_bytes_sent")) << "step " << s;
    differs = differs || bf16[s].at("loss") != fp32[s].at("loss");
  }
  EXPECT_TRUE(differs) << "no step's loss changed: were the values rounded at all?";
  const double first = MeanLoss(bf16, 0, 10), last = MeanLoss(bf16, 280, 300), last_fp32 = MeanLoss(fp32, 280, 300);
  std::cout << "bf16: loss " << first << " -> " << last << "; fp32 ends at " << last_fp32 << "\n";
  EXPECT_LT(last, 0.75 * first);
  EXPECT_NEAR(last, last_fp32, 0.03 * last_fp32);
}

TEST(TrainingTest, StuckTrainerThatHeartbeatsEndsTheJobNamingIt) {
  testing::LocalCluster cluster("stuck_trainer");
  json job = SyntheticJob(1000000, 1, 2);
  job["runtime"]["stall_timeout_ms"] = 2000;
  job["cluster"] = {{"num_ps", 1}, {"num_trainers", 2}};
  ASSERT_TRUE(cluster.StartMaster(job).ok());
  ASSERT_TRUE(cluster.StartPs(0).ok());
  ASSERT_TRUE(cluster.StartTrainer(0, 2).ok());
  ASSERT_TRUE(cluster.StartTrainer(1, 2, "trainer1", {"--test_stall_at_step", "30"}).ok());
  const int code = cluster.Wait("master", milliseconds(60000));
  ASSERT_NE(code, -1) << "the master does not notice a stuck trainer:\n" << cluster.Log("master");
  EXPECT_EQ(code, 1);
  const std::string log = cluster.Log("master");
  EXPECT_NE(log.find("JOB FAILED: DEADLINE_EXCEEDED: "), std::string::npos) << log;
  EXPECT_NE(log.find("trainer 1 (host"), std::string::npos) << log;
  EXPECT_NE(log.find("30 steps done"), std::string::npos) << log;
  EXPECT_NE(log.find("finished no step for"), std::string::npos) << log;
  // Heartbeating, it learns the job ended; stuck, it is ended after a grace.
  EXPECT_NE(cluster.Wait("trainer1", milliseconds(20000)), -1) << cluster.Log("trainer1");
  EXPECT_NE(cluster.Wait("trainer0", milliseconds(20000)), -1) << cluster.Log("trainer0");
  EXPECT_NE(cluster.Wait("ps0", milliseconds(20000)), -1) << cluster.Log("ps0");
}

// A table far larger than the servers' memory is refused at the start,
// saying what it needs and what is free (issue 13: one such job grew a
// process to 10 GB before), unless the servers keep rows in RocksDB.
TEST(TrainingTest, TableThatCannotFitInTheServersMemoryIsRefusedAtTheStart) {
  testing::LocalCluster cluster("too_large");
  json job = SyntheticJob(100, 1, 1);
  job["tables"][0]["num_embeddings"] = int64_t{1} << 40;
  ASSERT_TRUE(cluster.StartJob(job, 1, 1).ok());
  EXPECT_EQ(cluster.Wait("master", milliseconds(60000)), 1) << cluster.Log("master");
  const std::string log = cluster.Log("master");
  EXPECT_NE(log.find("RESOURCE_EXHAUSTED: table users does not fit"), std::string::npos) << log;
  EXPECT_NE(log.find("free capacity: ps0"), std::string::npos) << log;
  EXPECT_NE(cluster.Wait("ps0", milliseconds(20000)), -1) << cluster.Log("ps0");
  EXPECT_NE(cluster.Wait("trainer0", milliseconds(20000)), -1) << cluster.Log("trainer0");
}

// A job whose loss goes NaN ends naming that and the step, not by the
// servers' refusal of its NaN gradients, which says nothing of why.
TEST(TrainingTest, DivergedTrainingEndsTheJobSayingSo) {
  testing::LocalCluster cluster("diverged");
  json job = SyntheticJob(1000, 1, 2);
  job["training"]["dense_optimizer"]["lr"] = 1e12;
  ASSERT_TRUE(cluster.StartJob(job, 1, 2).ok());
  EXPECT_EQ(cluster.Wait("master", milliseconds(60000)), 1) << cluster.Log("master");
  const std::string log = cluster.Log("master");
  EXPECT_NE(log.find("JOB FAILED: ABORTED: trainer "), std::string::npos) << log;
  EXPECT_NE(log.find("training diverged: the loss of step "), std::string::npos) << log;
  EXPECT_NE(log.find("learning rates too high"), std::string::npos) << log;
  for (const char* role : {"ps0", "trainer0", "trainer1"}) {
    EXPECT_NE(cluster.Wait(role, milliseconds(20000)), -1) << cluster.Log(role);
  }
}

// A mistyped --master is refused at the start, saying what is wrong; a
// server given one used to crash (its start failed, and its teardown read a
// peer pool never made).
TEST(TrainingTest, AMistypedMasterAddressFailsAtOnceWithTheReason) {
  testing::LocalCluster cluster("bad_master_address");
  ASSERT_TRUE(cluster.StartPs(0, {"--master", "notanaddress"}).ok());
  EXPECT_EQ(cluster.Wait("ps0", milliseconds(20000)), 1) << cluster.Log("ps0");
  EXPECT_NE(cluster.Log("ps0").find("'notanaddress' is not an address of the form tcp://HOST:PORT"),
            std::string::npos)
      << cluster.Log("ps0");
  ASSERT_TRUE(cluster.StartTrainer(0, 1, "trainer0", {"--master", "tcp://127.0.0.1:99999"}).ok());
  EXPECT_EQ(cluster.Wait("trainer0", milliseconds(20000)), 1) << cluster.Log("trainer0");
  EXPECT_NE(cluster.Log("trainer0").find("the port is not in 1..65535"), std::string::npos) << cluster.Log("trainer0");
}

TEST(TrainingTest, BadConfigFailsAtOnceWithTheReason) {
  testing::LocalCluster cluster("bad_config");
  json config = SyntheticJob(10, 1, 1);
  config["tables"][0]["embedding_dim"] = -3;
  Status st = cluster.StartMaster(config);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(cluster.Wait("master", milliseconds(10000)), 1);
  EXPECT_NE(cluster.Log("master").find("tables[0].embedding_dim"), std::string::npos) << cluster.Log("master");
}

}  // namespace
}  // namespace tessera
