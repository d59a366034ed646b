// Parameter servers that join, leave and fail while a synchronous job trains
// (real processes on 127.0.0.1). Each run is compared, parameter by parameter,
// with the same job run without any change: a lost server rolls the job back
// to its newest checkpoint and replays, an added or removed one moves the rows
// at a step boundary; either way a sync job must end where the undisturbed
// one ends, bit for bit (the job pools row-split bags whole,
// training.plan_independent_pooling, so another server count rounds
// nothing otherwise).
//
// Faults land at seeded random steps; TESSERA_TEST_SEED changes the seed
// (the one used is printed).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "common/job_config.h"
#include "common/param_file.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/test_jobs.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kSteps = 400;
constexpr int64_t kEvery = 25;

uint32_t Seed() { return static_cast<uint32_t>(testing::TestSeed(20261201u)); }

// A step in [lo, hi] drawn from the test's seed and `salt`.
int64_t SeededStep(int64_t lo, int64_t hi, uint32_t salt) {
  std::mt19937 rng(Seed() + salt);
  const int64_t step = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  std::cout << "seed " << Seed() << ": step " << step << "\n";
  return step;
}

std::string TempRoot(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tessera_elastic_" + name + "_" + std::to_string(getpid()));
}

json Job(const std::string& ckpt_dir, int64_t steps = kSteps) {
  return testing::StatefulSyncJob("elastic-test", ckpt_dir, steps, kEvery);
}

// The parameters of the undisturbed job of `steps` on 2 servers, computed
// once per length.
const testing::Dump& Undisturbed(int64_t steps = kSteps) {
  static std::map<int64_t, std::unique_ptr<testing::Dump>> dumps;
  std::unique_ptr<testing::Dump>& dump = dumps[steps];
  if (dump == nullptr) {
    const std::string root = TempRoot("undisturbed_" + std::to_string(steps));
    std::filesystem::remove_all(root);
    testing::LocalCluster c("elastic_undisturbed_" + std::to_string(steps));
    EXPECT_TRUE(c.StartJob(Job(root, steps), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
    EXPECT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
    // Every process ends by itself: a sanitized one reports at exit, and the
    // cluster's teardown killing it then would cut its report short.
    for (const char* p : {"ps0", "ps1", "trainer0", "trainer1"}) {
      EXPECT_EQ(c.Wait(p, milliseconds(20000)), 0) << c.Log(p);
    }
    auto job = ParseJobConfigJson(Job("", steps), "");
    auto d = testing::ReadDump(c.dir() + "/dump", *job);
    EXPECT_TRUE(d.ok()) << d.status();
    std::filesystem::remove_all(root);
    dump = std::make_unique<testing::Dump>(d.ok() ? std::move(*d) : testing::Dump{});
  }
  return *dump;
}

// The job in `c` ended well, every process is gone, and its parameters equal
// the undisturbed run's.
void ExpectSameParameters(testing::LocalCluster& c, int64_t steps = kSteps) {
  auto job = ParseJobConfigJson(Job("", steps), "");
  ASSERT_TRUE(job.ok()) << job.status();
  auto d = testing::ReadDump(c.dir() + "/dump", *job);
  ASSERT_TRUE(d.ok()) << d.status();
  const testing::Dump& want = Undisturbed(steps);
  ASSERT_FALSE(want.rows.empty());
  std::string where;
  const double diff = testing::MaxDifference(want, *d, &where);
  std::cout << "max |changed - undisturbed| = " << diff << " (" << where << ")\n";
  EXPECT_EQ(diff, 0.0) << where;
  EXPECT_GT(d->rows.at("rows").size(), 50u);
}

// The member id the master gave a server (its registration order, not the
// order the test started them in).
int MemberId(testing::LocalCluster& c, const std::string& ps) {
  const std::string log = c.Log(ps);
  const std::string mark = " as ps ";
  const size_t at = log.find(mark);
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + mark.size());
}

// How many of `name`'s descriptors are of `kind`: as soon as that is fewer
// than `before`, or after 10 s. Fails the test if `name` exits first (an
// exited process that is not yet reaped shows no descriptors at all).
int FilesOnceFewerThan(testing::LocalCluster& c, const std::string& name, const std::string& kind, int before) {
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
  for (;;) {
    const int n = c.OpenFiles(name, kind);
    if (n <= 0 || !c.Running(name)) {
      ADD_FAILURE() << name << " ended before its descriptors were seen to close";
      return before;
    }
    if (n < before || std::chrono::steady_clock::now() >= deadline) return n;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

void ExpectTrainersFinished(testing::LocalCluster& c, int64_t steps = kSteps) {
  for (const char* t : {"trainer0", "trainer1"}) EXPECT_EQ(c.Wait(t, milliseconds(20000)), 0) << c.Log(t);
  // The last generation trained to the end.
  const auto m = c.Metrics(0);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.back()["step"], steps - 1);
}

// Trainer 0 trained steps 0, 1, ... in generation 1 until the loss, then,
// in `generation`, again from the step the master's `log` says the job
// rolled back to, to the end: the steps between that checkpoint and the loss
// show twice. (None does where the loss came just as that checkpoint
// completed, before either trainer went past it.)
// The step the master's `log` says the job rolled back to first; -1 if none.
int64_t RolledBackTo(const std::string& log) {
  const std::string kBack = "rolling back to step ";
  const size_t at = log.find(kBack);
  return at == std::string::npos ? -1 : std::stoll(log.substr(at + kBack.size()));
}

void ExpectTrainedAgainFromTheRollback(const testing::LocalCluster& c, const std::string& log, int generation) {
  const int64_t back = RolledBackTo(log);
  ASSERT_GE(back, 0) << log;
  const auto m = c.Metrics(0);
  size_t first = 0;
  for (; first < m.size() && m[first]["generation"].get<int>() == 1; ++first) {
    ASSERT_EQ(m[first]["step"].get<int64_t>(), static_cast<int64_t>(first));
  }
  EXPECT_GE(static_cast<int64_t>(first), back) << "generation 1 stopped before the checkpoint it rolled back to";
  ASSERT_EQ(m.size() - first, static_cast<size_t>(kSteps - back));
  for (size_t i = first; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["generation"].get<int>(), generation);
    EXPECT_EQ(m[i]["step"].get<int64_t>(), back + static_cast<int64_t>(i - first));
  }
}

TEST(ElasticTest, KilledServerRollsBackToTheCheckpointAndEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 1);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  // Each ZeroMQ socket holds an eventfd.
  const int master_files = c.OpenFiles("master", "eventfd"), trainer_files = c.OpenFiles("trainer0", "eventfd");
  c.Kill("ps1", SIGKILL);
  // Once the job goes on without it, nothing holds the lost server's
  // connection open (nor tries to reconnect to it).
  ASSERT_TRUE(c.WaitForLog("master", "on 1 parameter server(s)", milliseconds(60000))) << c.Log("master");
  ASSERT_TRUE(c.WaitForSteps(0, c.Metrics(0).size() + 10, milliseconds(60000))) << c.Log("trainer0");
  // libzmq frees a closed socket's descriptors later, on its own reaper
  // thread: on a loaded machine that can take longer than ten steps, so the
  // count is watched while the job runs rather than read once.
  EXPECT_LT(FilesOnceFewerThan(c, "master", "eventfd", master_files), master_files);
  EXPECT_LT(FilesOnceFewerThan(c, "trainer0", "eventfd", trainer_files), trainer_files);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("[master] lost parameter server " + std::to_string(MemberId(c, "ps1"))), std::string::npos)
      << log;
  EXPECT_NE(log.find("rolling back to step"), std::string::npos) << log;
  EXPECT_NE(log.find("on 1 parameter server(s)"), std::string::npos) << log;
  // Found by its closed connection (runtime.connection_loss_ms), not after
  // the 3 s of silence a hung server takes.
  EXPECT_NE(log.find("closed its connection"), std::string::npos) << log;
  EXPECT_EQ(c.Wait("ps0", milliseconds(10000)), 0) << c.Log("ps0");
  ExpectTrainersFinished(c);
  ExpectTrainedAgainFromTheRollback(c, log, 3);  // 1, then lost (2), then restored (3)
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, StoppedServerIsFencedWhenItWakesAndNothingIsAppliedTwice) {
  Undisturbed();
  const std::string root = TempRoot("stop");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_stop");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 2);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  c.Kill("ps0", SIGSTOP);
  ASSERT_TRUE(c.WaitForLog("master", "[master] recovered", milliseconds(60000))) << c.Log("master");
  c.Kill("ps0", SIGCONT);
  // Its late heartbeat is refused: it learns it left the job and stops.
  EXPECT_EQ(c.Wait("ps0", milliseconds(20000)), 1) << c.Log("ps0");
  EXPECT_NE(c.Log("ps0").find("not a member of this job"), std::string::npos) << c.Log("ps0");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  EXPECT_EQ(c.Wait("ps1", milliseconds(10000)), 0) << c.Log("ps1");
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// Storage of the servers: memory, host memory over RocksDB (most rows below),
// and the GPU tier's logic on the host over that.
class ChangeServersTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> PsArgs(const std::string& dir) const {
    if (GetParam() == "memory") return {};
    std::vector<std::string> args = {"--rocksdb_path", dir + "/rocks{i}", "--host_bytes", "2048"};
    if (GetParam() == "gpu_tier_on_host") {
      args.insert(args.end(), {"--gpu_tier_on_host", "--gpu_bytes", "4096", "--gpu_tier_min_rows", "64"});
    }
    return args;
  }
};

TEST_P(ChangeServersTest, AddedThenRemovedServerEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("change_" + GetParam());
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_change_" + GetParam());
  const auto ps_args = PsArgs(c.dir());
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}, ps_args).ok());
  const int64_t add_at = SeededStep(10, kSteps / 3, 3);
  ASSERT_TRUE(c.WaitForSteps(0, add_at, milliseconds(60000))) << c.Log("master");
  // 2 -> 3 servers.
  ASSERT_TRUE(c.StartPs(2, ps_args).ok());
  ASSERT_TRUE(c.WaitForLog("master", "generation 2: 3 parameter server(s)", milliseconds(60000))) << c.Log("master");
  EXPECT_NE(c.Log("master").find("change servers"), std::string::npos) << c.Log("master");
  const size_t done = c.Metrics(0).size();
  ASSERT_TRUE(c.WaitForSteps(0, done + 20, milliseconds(60000))) << c.Log("master");
  // 3 -> 2: the first server leaves, drained to the others.
  std::string out;
  ASSERT_GE(MemberId(c, "ps0"), 0) << c.Log("ps0");
  ASSERT_EQ(c.Control({"remove_ps", std::to_string(MemberId(c, "ps0"))}, &out), 0) << out;
  ASSERT_TRUE(c.WaitForLog("master", "generation 3: 2 parameter server(s)", milliseconds(60000))) << c.Log("master");
  EXPECT_EQ(c.Wait("ps0", milliseconds(20000)), 0) << c.Log("ps0");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  for (const char* p : {"ps1", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  // No step was trained twice: changes move rows at a boundary, no rollback.
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kSteps));
  if (GetParam() == "memory") {
    // A whole table that stays on its server is kept as it is, under the
    // new plan's shard id (a RocksDB-backed one only under the same id).
    const std::string logs = c.Log("ps0") + c.Log("ps1") + c.Log("ps2");
    EXPECT_NE(logs.find("kept 1 shard(s)"), std::string::npos) << logs;
  }
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Storage, ChangeServersTest, ::testing::Values("memory", "rocksdb", "gpu_tier_on_host"),
                         [](const auto& info) { return info.param; });

// No checkpoints at all: the rows an added server takes over come straight
// from the servers that held them, and a removed one hands its rows over the
// same way; the job neither replays a step nor needs a checkpoint folder.
TEST(ElasticTest, ServersChangeWithoutAnyCheckpointAndTheJobEndsLikeAnUndisturbedRun) {
  // Without checkpoints the job runs fastest: adding a server (starting its
  // process, the precopy) took some 200 of its steps here, and 400 steps
  // could end before the removal. Three times as many leave both room.
  constexpr int64_t kLongSteps = 3 * kSteps;
  Undisturbed(kLongSteps);
  testing::LocalCluster c("elastic_no_checkpoints");
  json job = Job("", kLongSteps);
  job.erase("checkpoint");
  ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(10, kSteps / 3, 12), milliseconds(60000))) << c.Log("master");
  ASSERT_TRUE(c.StartPs(2).ok());
  ASSERT_TRUE(c.WaitForLog("master", "generation 2: 3 parameter server(s)", milliseconds(60000))) << c.Log("master");
  ASSERT_TRUE(c.WaitForSteps(0, c.Metrics(0).size() + 20, milliseconds(60000))) << c.Log("master");
  c.Kill("ps1", SIGTERM);
  EXPECT_EQ(c.Wait("ps1", milliseconds(30000)), 0) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("generation 3: 2 parameter server(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("[master] migration at step"), std::string::npos) << log;
  EXPECT_EQ(log.find("checkpoint at step"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c, kLongSteps);
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kLongSteps));
  // The summary lists both moves, with the rows that went.
  std::ifstream in(c.dir() + "/summary.json");
  json summary;
  ASSERT_NO_THROW(in >> summary);
  ASSERT_EQ(summary["migrations"].size(), 2u) << summary.dump();
  for (const json& m : summary["migrations"]) {
    EXPECT_GT(m["rows"].get<int64_t>(), 0) << m;
    EXPECT_GT(m["bytes"].get<int64_t>(), 0) << m;
    EXPECT_GE(m["pause_s"].get<double>(), m["seconds"].get<double>()) << m;
    // Copied while the job trained first: the boundary moved only the rows
    // updated since (runtime.precopy, on by default).
    EXPECT_EQ(m["phase"], "changed") << m;
    EXPECT_GT(m["precopy"]["rows"].get<int64_t>(), 0) << m;
  }
  ExpectSameParameters(c, kLongSteps);
}

TEST(ElasticTest, SigtermDrainsAServerWhichThenExitsZero) {
  Undisturbed();
  const std::string root = TempRoot("sigterm");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_sigterm");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(10, kSteps / 2, 4), milliseconds(60000))) << c.Log("master");
  c.Kill("ps1", SIGTERM);
  EXPECT_EQ(c.Wait("ps1", milliseconds(30000)), 0) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  EXPECT_NE(c.Log("master").find("generation 2: 1 parameter server(s)"), std::string::npos) << c.Log("master");
  ExpectTrainersFinished(c);
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kSteps));
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, KilledTrainerIsReplacedAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_trainer");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_trainer");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 5);
  ASSERT_TRUE(c.WaitForSteps(1, step, milliseconds(60000))) << c.Log("master");
  c.Kill("trainer1", SIGKILL);
  // Started at once, as a supervisor would: it waits until the master has
  // found the rank's holder lost, then takes the rank.
  ASSERT_TRUE(c.StartTrainer(1, 2, "trainer1_replacement").ok());
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer1_replacement");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("[master] lost trainer 1"), std::string::npos) << log;
  EXPECT_NE(log.find("rolling back to step"), std::string::npos) << log;
  EXPECT_EQ(c.Wait("trainer1_replacement", milliseconds(20000)), 0) << c.Log("trainer1_replacement");
  EXPECT_EQ(c.Wait("trainer0", milliseconds(20000)), 0) << c.Log("trainer0");
  for (const char* p : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainedAgainFromTheRollback(c, log, 3);  // 1, then lost (2), then restored (3)
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, StoppedTrainerIsFencedWhenItWakesAndItsReplacementFinishes) {
  Undisturbed();
  const std::string root = TempRoot("stop_trainer");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_stop_trainer");
  json job = Job(root);
  // The other trainer waits in the allreduce for the stopped one this long.
  job["runtime"]["collective_timeout_ms"] = 4000;
  ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 6);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  c.Kill("trainer0", SIGSTOP);
  ASSERT_TRUE(c.StartTrainer(0, 2, "trainer0_replacement").ok());
  ASSERT_TRUE(c.WaitForLog("master", "[master] recovered", milliseconds(60000))) << c.Log("master");
  c.Kill("trainer0", SIGCONT);
  // Its late requests carry a registration the rank no longer has: refused.
  EXPECT_EQ(c.Wait("trainer0", milliseconds(20000)), 2) << c.Log("trainer0");
  EXPECT_NE(c.Log("trainer0").find("was replaced"), std::string::npos) << c.Log("trainer0");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  EXPECT_EQ(c.Wait("trainer0_replacement", milliseconds(20000)), 0) << c.Log("trainer0_replacement");
  EXPECT_EQ(c.Wait("trainer1", milliseconds(20000)), 0) << c.Log("trainer1");
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, KilledMasterIsRestartedAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_master");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_master");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 7);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  c.Kill("master", SIGKILL);
  ASSERT_EQ(c.Wait("master", milliseconds(10000)), 128 + SIGKILL);
  // Servers and trainers keep retrying the address meanwhile.
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_TRUE(c.RestartMaster("master_recovered", {"--recover", "--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_EQ(c.Wait("master_recovered", milliseconds(120000)), 0) << c.Log("master_recovered") << c.Log("trainer0");
  const std::string log = c.Log("master_recovered");
  EXPECT_NE(log.find("[master] took the job over from its lost master; rolling back to step"), std::string::npos)
      << log;
  for (const char* p : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  // The new master's generations go on above the old one's.
  EXPECT_GE(c.Metrics(0).back()["generation"].get<int>(), 2);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// A master that hangs (SIGSTOP: a paused VM, a swap storm) for longer than
// the peer timeout sees, when it wakes, no heartbeat from anyone for that
// long; it was the one away, so nobody is declared lost.
TEST(ElasticTest, StoppedMasterWakesAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("stop_master");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_stop_master");
  const json job = Job(root);
  ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 11);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  c.Kill("master", SIGSTOP);
  // Past the peer timeout, within the time members keep retrying the master.
  const int64_t peer_timeout = job["runtime"]["peer_timeout_ms"].get<int64_t>();
  ASSERT_LT(peer_timeout + 1000, job["runtime"]["master_reconnect_ms"].get<int64_t>());
  std::this_thread::sleep_for(milliseconds(peer_timeout + 1000));
  c.Kill("master", SIGCONT);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("the master did not run for"), std::string::npos) << log;
  EXPECT_EQ(log.find("lost"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// The job in `c` ended with nobody lost and nothing rolled back (still its
// first generation), and with the undisturbed run's parameters.
void ExpectEndedAsIfUndisturbed(testing::LocalCluster& c) {
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string log = c.Log("master");
  EXPECT_EQ(log.find("lost"), std::string::npos) << log;
  EXPECT_EQ(log.find("rolling back"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  EXPECT_EQ(c.Metrics(0).back()["generation"].get<int>(), 1);
  ExpectSameParameters(c);
}

// Hangs shorter than the peer timeout (SIGSTOP of a server, a trainer, then
// the master, each at a seeded step, for half the timeout) are waited out:
// nobody is lost, nothing rolls back, and the job ends bit for bit as an
// undisturbed one.
TEST(ElasticTest, BriefStopsOfEveryRoleChangeNothing) {
  Undisturbed();
  const std::string root = TempRoot("brief_stops");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_brief_stops");
  json job = Job(root);
  // The allreduce and the sync lookups wait for a stopped peer this long.
  job["runtime"]["collective_timeout_ms"] = 10000;
  ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const milliseconds stop(job["runtime"]["peer_timeout_ms"].get<int64_t>() / 2);
  int64_t step = kEvery;
  uint32_t salt = 20;
  for (const char* who : {"ps1", "trainer1", "master"}) {
    step = SeededStep(step + 10, step + 90, salt++);
    ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
    c.Kill(who, SIGSTOP);
    std::this_thread::sleep_for(stop);
    c.Kill(who, SIGCONT);
  }
  ExpectEndedAsIfUndisturbed(c);
  std::filesystem::remove_all(root);
}

// The port a server or the master listens on, from its log ("as ps N
// (tcp://HOST:PORT)" or the master's "listening on tcp://HOST:PORT").
std::string ListeningPort(testing::LocalCluster& c, const std::string& name) {
  static const std::regex server(R"(as ps \d+ \(tcp://[^:]+:(\d+)\))"), master(R"(listening on tcp://[^:]+:(\d+))");
  const std::string log = c.Log(name);
  std::smatch m;
  if (std::regex_search(log, m, name == "master" ? master : server)) return m[1].str();
  return "";
}

// Closes every TCP connection to `port` (ss -K: a reset, as a firewall or
// a NIC that flaps does); how many it closed.
int ResetConnections(const std::string& port) {
  const std::string command = "ss -K -tnH 'sport = :" + port + "' 2>/dev/null";
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return 0;
  int closed = 0;
  char line[512];
  while (fgets(line, sizeof(line), out) != nullptr) ++closed;
  pclose(out);
  return closed;
}

// Every connection to a server, then to the other, then to the master, is
// reset (ss -K) at seeded steps of a sync job: the members reconnect, the
// requests in flight are sent again, nobody is lost and nothing rolls back,
// and the job ends as an undisturbed one. (Before the calls went again, a
// reply lost with its connection was waited for until its deadline, and a
// lost checkpoint barrier reply hung the job: seeds 5 and 20261201.)
TEST(ElasticTest, ResetConnectionsChangeNothing) {
  Undisturbed();
  const std::string root = TempRoot("reset_connections");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_reset_connections");
  // (The calls' deadline stays at its default, 2 minutes: the calls a reset
  // catches go again at once, not when it passes.)
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  int64_t step = kEvery;
  uint32_t salt = 30;
  for (const char* who : {"ps1", "ps0", "master"}) {
    step = SeededStep(step + 10, step + 90, salt++);
    ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
    const std::string port = ListeningPort(c, who);
    ASSERT_FALSE(port.empty()) << c.Log(who);
    const int closed = ResetConnections(port);
    if (closed == 0) GTEST_SKIP() << "ss -K closed no connection to " << who << " (port " << port
                                  << "): this kernel cannot destroy sockets (CONFIG_INET_DIAG_DESTROY), or ss is missing";
    std::cout << "reset " << closed << " connection(s) to " << who << " after step " << step << "\n";
  }
  ExpectEndedAsIfUndisturbed(c);
  std::filesystem::remove_all(root);
}

// The steps of the checkpoints `log` says were complete.
std::vector<int64_t> CompleteCheckpointSteps(const std::string& log) {
  static const std::regex complete(R"(checkpoint at step (\d+) complete)");
  std::vector<int64_t> steps;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), complete); it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoll((*it)[1].str()));
  }
  return steps;
}

// A tmpfs of `megabytes` at `dir` (created), unmounted and removed on
// destruction; mounted() is false where that needs root and the test runs
// without it (why() says so).
class SmallDisk {
 public:
  SmallDisk(std::string dir, int megabytes) : dir_(std::move(dir)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string size = "size=" + std::to_string(megabytes) + "m";
    mounted_ = mount("tessera_test", dir_.c_str(), "tmpfs", 0, size.c_str()) == 0;
    if (!mounted_) {
      why_ = "cannot mount a " + std::to_string(megabytes) + " MiB tmpfs at " + dir_ + " (" + std::strerror(errno) +
             "): needs root";
    }
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir_);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  // Takes what room is left with one file, as another process would, down
  // to the last byte: with a block's worth left, the servers' small shard
  // files could still fit and only the master's manifest fail, and the
  // tests could not tell which failure they get.
  void Fill() const { Write(O_TRUNC); }
  // Takes again what room was freed since (an old checkpoint pruned).
  void TopUp() const { Write(O_APPEND); }
  void Free() const { std::filesystem::remove(filler()); }

 private:
  void Write(int mode) const {
    const int fd = open(filler().c_str(), O_WRONLY | O_CREAT | mode, 0644);
    ASSERT_GE(fd, 0) << filler() << ": " << std::strerror(errno);
    const std::vector<char> block(1 << 16, 'x');
    for (size_t size = block.size(); size > 0; size /= 2) {
      while (write(fd, block.data(), size) == static_cast<ssize_t>(size)) {
      }
    }
    close(fd);
  }
  std::string filler() const { return dir_ + "/filler"; }
  std::string dir_;
  bool mounted_ = false;
  std::string why_;
};

// Once trainer 0 has reached `step`, takes all of `disk`'s room until the
// master reports a failed checkpoint (and, when given, until its log says
// `then`), then gives it back; *failed is the step of the first failed
// checkpoint.
void FillUntilACheckpointFails(testing::LocalCluster& c, const SmallDisk& disk, int64_t step, int64_t* failed,
                               const std::string& then = "") {
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  disk.Fill();
  const std::string kFailed = "CHECKPOINT FAILED at step ";
  // Room freed after the fill (a pruned checkpoint) let checkpoints
  // complete until the wait ran out (CI, 2026-12-08): kept full instead.
  bool seen = false;
  for (int i = 0; i < 30 && !seen; ++i) {
    seen = c.WaitForLog("master", kFailed, milliseconds(2000));
    if (!seen) disk.TopUp();
  }
  ASSERT_TRUE(seen) << c.Log("master");
  if (!then.empty()) {
    ASSERT_TRUE(c.WaitForLog("master", then, milliseconds(60000))) << c.Log("master");
  }
  disk.Free();
  const std::string log = c.Log("master");
  *failed = std::stoll(log.substr(log.find(kFailed) + kFailed.size()));
}

// The disk of the checkpoints fills up at a seeded step (another process
// takes what is left): the checkpoints fail, and the job goes on without
// them. Once there is room again they are taken again, and a server killed
// after that rolls the job back to a complete one: the job ends like an
// undisturbed run. Needs root (a 4 MiB tmpfs is mounted); skipped without.
TEST(ElasticTest, CheckpointsOnAFullDiskFailAndTheJobGoesOn) {
  constexpr int64_t kLongSteps = 3 * kSteps;
  Undisturbed(kLongSteps);
  const std::string root = TempRoot("full_disk");
  SmallDisk disk(root, 4);
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  testing::LocalCluster c("elastic_full_disk");
  ASSERT_TRUE(c.StartJob(Job(root + "/ckpt", kLongSteps), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  int64_t failed = -1;
  ASSERT_NO_FATAL_FAILURE(FillUntilACheckpointFails(c, disk, SeededStep(2 * kEvery, kLongSteps / 3, 12), &failed));
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  // Room again: the next checkpoint is complete; then a server is lost.
  int64_t after = -1;
  for (auto deadline = std::chrono::steady_clock::now() + milliseconds(60000);
       after < 0 && std::chrono::steady_clock::now() < deadline;) {
    for (int64_t s : CompleteCheckpointSteps(c.Log("master"))) {
      if (s > failed) after = s;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_GT(after, failed) << c.Log("master");
  c.Kill("ps1", SIGKILL);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string end = c.Log("master");
  EXPECT_NE(end.find("[master] lost parameter server"), std::string::npos) << end;
  const int64_t back = RolledBackTo(end);
  ASSERT_GE(back, 0) << end;
  EXPECT_GE(back, after) << end;
  // No folder of a failed checkpoint is left behind.
  for (const auto& entry : std::filesystem::directory_iterator(root + "/ckpt")) {
    EXPECT_TRUE(std::filesystem::exists(entry.path() / "manifest.json")) << entry.path();
  }
  EXPECT_EQ(c.Wait("ps0", milliseconds(10000)), 0) << c.Log("ps0");
  ExpectTrainersFinished(c, kLongSteps);
  ExpectSameParameters(c, kLongSteps);
}

// The disk under the servers' RocksDB tier fills up at a seeded step. The
// servers stop short of it (Debian's RocksDB aborted them there: first at
// shard creation, preallocating a WAL, then at a checkpoint's flush): their
// checkpoints fail saying how much room there is, and rows stay in memory.
// Once there is room again checkpoints are complete again, and the job ends
// like an undisturbed run, bit for bit. Needs root (a 16 MiB tmpfs); skipped
// without.
TEST(ElasticTest, TieredServersRideOutAFullDiskAndEndLikeAnUndisturbedRun) {
  constexpr int64_t kLongSteps = 3 * kSteps;
  Undisturbed(kLongSteps);
  const std::string root = TempRoot("full_rocks_disk");
  SmallDisk disk(root, 16);
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  testing::LocalCluster c("elastic_full_rocks_disk");
  ASSERT_TRUE(c.StartJob(Job(c.dir() + "/ckpt", kLongSteps), 2, 2, {"--dump_dir", c.dir() + "/dump"},
                         {"--rocksdb_path", root + "/ps{i}", "--host_bytes", "2048", "--rocksdb_reserved_bytes",
                          "1048576"})
                  .ok());
  int64_t failed = -1;
  // A checkpoint that checked the room just before the disk filled fails in
  // RocksDB's own write instead (No space left on device); the next one
  // finds no room first, and says so. The disk stays full until it has.
  ASSERT_NO_FATAL_FAILURE(
      FillUntilACheckpointFails(c, disk, SeededStep(2 * kEvery, kLongSteps / 3, 13), &failed, "bytes free"));
  const std::string log = c.Log("master");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("ps0") << c.Log("ps1");
  int64_t after = -1;
  for (int64_t s : CompleteCheckpointSteps(c.Log("master"))) after = std::max(after, s);
  EXPECT_GT(after, failed) << c.Log("master");
  // The servers stopped short of the full disk and said why.
  EXPECT_NE(log.find("bytes free"), std::string::npos) << log;
  for (const char* ps : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(ps, milliseconds(10000)), 0) << c.Log(ps);
  ExpectTrainersFinished(c, kLongSteps);
  ExpectSameParameters(c, kLongSteps);
}

// Every backup<id>.params of a dump equals its shard<id>.params, row by row
// and bit by bit; returns how many backups were compared.
int ExpectBackupsEqualPrimaries(const std::string& dump) {
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dump)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("backup", 0) != 0) continue;
    auto backup = ReadParamFile(entry.path().string());
    auto primary = ReadParamFile(dump + "/shard" + name.substr(6));
    EXPECT_TRUE(backup.ok() && primary.ok()) << name << ": " << backup.status() << primary.status();
    if (!backup.ok() || !primary.ok()) continue;
    auto rows_of = [](const std::vector<ParamArray>& arrays) {
      std::map<int64_t, std::vector<float>> rows;
      const ParamArray* ids = FindParam(arrays, "ids");
      const ParamArray* values = FindParam(arrays, "rows");
      if (ids == nullptr || values == nullptr) return rows;
      const size_t width = ids->i64.empty() ? 0 : values->f32.size() / ids->i64.size();
      for (size_t i = 0; i < ids->i64.size(); ++i) {
        rows[ids->i64[i]].assign(values->f32.begin() + i * width, values->f32.begin() + (i + 1) * width);
      }
      return rows;
    };
    const auto b = rows_of(*backup), p = rows_of(*primary);
    EXPECT_FALSE(p.empty()) << name;
    EXPECT_TRUE(b == p) << name << ": the backup's rows differ from the primary's";
    ++compared;
  }
  return compared;
}

// Starts the job of this file with per-server flags (a fault for one).
Status StartWithServerFlags(testing::LocalCluster& c, const json& config,
                            const std::vector<std::vector<std::string>>& ps_flags,
                            const std::vector<std::string>& master_args) {
  json job = config;
  job["cluster"]["num_ps"] = ps_flags.size();
  job["cluster"]["num_trainers"] = 2;
  TESSERA_RETURN_IF_ERROR(c.StartMaster(job, master_args));
  for (size_t i = 0; i < ps_flags.size(); ++i) TESSERA_RETURN_IF_ERROR(c.StartPs(static_cast<int>(i), ps_flags[i]));
  for (int r = 0; r < 2; ++r) TESSERA_RETURN_IF_ERROR(c.StartTrainer(r, 2));
  return Status::OK();
}

// A server whose store reports damaged rows (DATA_LOSS, as a checksum
// mismatch of its RocksDB tier does) leaves the job rather than failing it:
// the master counts it lost and rolls back to the newest checkpoint, and the
// job ends like an undisturbed run, bit for bit. Until then the damage
// reached a trainer as DATA_LOSS and ended the job. Injected at a seeded
// lookup: a small job's RocksDB blocks stay in its block cache, where damage
// on disk is never read.
TEST(ElasticTest, ServerThatFindsItsRowsDamagedLeavesAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("damaged_rows");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_damaged_rows");
  // Each trainer looks up once a step at each server.
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 17);
  ASSERT_TRUE(StartWithServerFlags(c, Job(root), {{}, {"--test_data_loss_at_lookup", std::to_string(2 * step)}},
                                   {"--dump_dir", c.dir() + "/dump"})
                  .ok());
  EXPECT_EQ(c.Wait("ps1", milliseconds(60000)), 1) << c.Log("ps1");
  EXPECT_NE(c.Log("ps1").find("found rows of its store damaged"), std::string::npos) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("[master] lost parameter server"), std::string::npos) << log;
  EXPECT_EQ(c.Wait("ps0", milliseconds(10000)), 0) << c.Log("ps0");
  ExpectTrainersFinished(c);
  ExpectTrainedAgainFromTheRollback(c, log, 3);  // 1, then lost (2), then restored (3)
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, ServerKilledDuringACheckpointRollsBackToThePreviousOne) {
  Undisturbed();
  const std::string root = TempRoot("kill_in_snapshot");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_in_snapshot");
  // It dies when the Nth checkpoint asks for its snapshot (step N x kEvery).
  const int64_t nth = SeededStep(2, 6, 8);
  ASSERT_TRUE(StartWithServerFlags(c, Job(root), {{}, {"--test_crash_on", "snapshot:" + std::to_string(nth)}},
                                   {"--dump_dir", c.dir() + "/dump"})
                  .ok());
  EXPECT_EQ(c.Wait("ps1", milliseconds(60000)), 9) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  // That checkpoint never completed: the one before it is where it resumes.
  EXPECT_NE(c.Log("master").find("rolling back to step " + std::to_string((nth - 1) * kEvery)), std::string::npos)
      << c.Log("master");
  EXPECT_EQ(c.Wait("ps0", milliseconds(10000)), 0) << c.Log("ps0");
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// A server dies in the move onto 3 servers: when told to copy rows while
// the job trains, when told to migrate at the boundary (the others are
// fetching its rows or about to), or when told to take the new plan (the
// others may have taken it already).
class KillInMigrationTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KillInMigrationTest, ServerKilledDuringAMigrationRollsBackAndEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_in_migration");
  std::filesystem::remove_all(root);
  // MIGRATE 1 is the precopy (while the job trains), 2 the boundary's move
  // of the rows updated since.
  const std::string at = GetParam() == "precopy"   ? "migrate:1"
                         : GetParam() == "migrate" ? "migrate:2"
                                                   : "create_shards:2";
  testing::LocalCluster c("elastic_kill_in_" + GetParam());
  ASSERT_TRUE(StartWithServerFlags(c, Job(root), {{}, {"--test_crash_on", at}}, {"--dump_dir", c.dir() + "/dump"})
                  .ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(10, kSteps / 3, 9), milliseconds(60000))) << c.Log("master");
  ASSERT_TRUE(c.StartPs(2).ok());
  EXPECT_EQ(c.Wait("ps1", milliseconds(60000)), 9) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("change servers"), std::string::npos) << log;
  EXPECT_NE(log.find("[master] lost parameter server"), std::string::npos) << log;
  EXPECT_NE(log.find("on 2 parameter server(s)"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(When, KillInMigrationTest, ::testing::Values("precopy", "migrate", "create_shards"),
                         [](const auto& info) { return info.param; });

TEST(ElasticTest, MasterKilledDuringACheckpointIsRestartedAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_master_in_checkpoint");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_master_in_checkpoint");
  const int64_t nth = SeededStep(2, 6, 10);
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--test_crash_in_checkpoint", std::to_string(nth)}).ok());
  ASSERT_EQ(c.Wait("master", milliseconds(60000)), 9) << c.Log("master");
  ASSERT_TRUE(c.RestartMaster("master_recovered", {"--recover", "--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_EQ(c.Wait("master_recovered", milliseconds(120000)), 0) << c.Log("master_recovered") << c.Log("trainer0");
  EXPECT_NE(c.Log("master_recovered").find("rolling back to step " + std::to_string((nth - 1) * kEvery)),
            std::string::npos)
      << c.Log("master_recovered");
  for (const char* p : {"ps0", "ps1"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// The master dies after the servers took a new plan (a server was added)
// and before the trainers heard of it: a new master takes over, rolls back to
// the checkpoint the change was made from, with every server that is there.
TEST(ElasticTest, MasterKilledDuringAMigrationIsRestartedAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_master_in_migration");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_master_in_migration");
  ASSERT_TRUE(c.StartJob(Job(root), 2, 2, {"--test_crash_in_migration", "1"}).ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(10, kSteps / 3, 11), milliseconds(60000))) << c.Log("master");
  ASSERT_TRUE(c.StartPs(2).ok());
  ASSERT_EQ(c.Wait("master", milliseconds(60000)), 9) << c.Log("master");
  EXPECT_NE(c.Log("master").find("--test_crash_in_migration 1: dying in this change"), std::string::npos);
  ASSERT_TRUE(c.RestartMaster("master_recovered", {"--recover", "--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_EQ(c.Wait("master_recovered", milliseconds(120000)), 0) << c.Log("master_recovered") << c.Log("trainer0");
  const std::string log = c.Log("master_recovered");
  EXPECT_NE(log.find("rolling back to step"), std::string::npos) << log;
  // ps2 ends as a member of the job (shut down by the master, exit 0):
  // taken in at the takeover when it re-registered in time, else added at a
  // later step boundary (the new master starts once the config's 2 servers
  // are back).
  EXPECT_NE(log.find("3 parameter server(s)"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps1", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

// A trainer dies at a checkpoint barrier after arriving, while the master
// snapshots: the checkpoint completes without it, a replacement takes the
// rank, and the job rolls back (to that checkpoint) and ends as undisturbed.
TEST(ElasticTest, TrainerKilledDuringACheckpointIsReplacedAndTheJobEndsLikeAnUndisturbedRun) {
  Undisturbed();
  const std::string root = TempRoot("kill_trainer_in_checkpoint");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_trainer_in_checkpoint");
  const int64_t nth = SeededStep(2, 6, 12);
  ASSERT_TRUE(c.StartMaster(Job(root), {"--num_ps", "2", "--num_trainers", "2", "--dump_dir", c.dir() + "/dump"}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.StartPs(i).ok());
  ASSERT_TRUE(c.StartTrainer(0, 2).ok());
  ASSERT_TRUE(c.StartTrainer(1, 2, "", {"--test_crash_in_checkpoint", std::to_string(nth)}).ok());
  ASSERT_EQ(c.Wait("trainer1", milliseconds(60000)), 9) << c.Log("trainer1");
  ASSERT_TRUE(c.StartTrainer(1, 2, "trainer1_replacement").ok());
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer1_replacement");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("[master] lost trainer 1"), std::string::npos) << log;
  EXPECT_NE(log.find("rolling back to step"), std::string::npos) << log;
  EXPECT_EQ(c.Wait("trainer1_replacement", milliseconds(20000)), 0) << c.Log("trainer1_replacement");
  EXPECT_EQ(c.Wait("trainer0", milliseconds(20000)), 0) << c.Log("trainer0");
  EXPECT_EQ(c.Metrics(0).back()["step"], kSteps - 1);
  ExpectSameParameters(c);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, ReplicatedJobEndsLikeAnUndisturbedOneAndBackupsEqualPrimaries) {
  Undisturbed();
  const std::string root = TempRoot("replicated");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_replicated");
  json job = Job(root);
  job["cluster"]["replicas"] = 2;
  ASSERT_TRUE(c.StartJob(job, 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  EXPECT_NE(c.Log("master").find("backup:"), std::string::npos) << c.Log("master");
  ExpectTrainersFinished(c);
  ExpectSameParameters(c);
  EXPECT_GE(ExpectBackupsEqualPrimaries(c.dir() + "/dump"), 3);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, KilledServerWithReplicasCostsNoRollbackAndBackupsAreRebuilt) {
  Undisturbed();
  const std::string root = TempRoot("kill_replicated");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_replicated");
  json job = Job(root);
  job["cluster"]["replicas"] = 2;
  ASSERT_TRUE(c.StartJob(job, 3, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
  const int64_t step = SeededStep(kEvery + 5, kSteps / 2, 11);
  ASSERT_TRUE(c.WaitForSteps(0, step, milliseconds(60000))) << c.Log("master");
  c.Kill("ps1", SIGKILL);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("its shards' backups take over (no rollback)"), std::string::npos) << log;
  EXPECT_NE(log.find("[master] promoted: generation 2 on 2 parameter server(s)"), std::string::npos) << log;
  EXPECT_EQ(log.find("rolling back"), std::string::npos) << log;
  // The new backups are copied while the job trains; at the next boundary
  // only the rows updated since move, and the plan has its backups back, on
  // the 2 left.
  EXPECT_NE(log.find("the rows updated since the precopy, which copied"), std::string::npos) << log;
  EXPECT_NE(log.find("generation 3: 2 parameter server(s)"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  // No step was trained twice.
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(c.Metrics(1).size(), static_cast<size_t>(kSteps));
  ExpectSameParameters(c);
  EXPECT_GE(ExpectBackupsEqualPrimaries(c.dir() + "/dump"), 3);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, ServerKilledDuringACheckpointWithReplicasCostsNoRollback) {
  Undisturbed();
  const std::string root = TempRoot("kill_replicated_in_snapshot");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_replicated_in_snapshot");
  json job = Job(root);
  job["cluster"]["replicas"] = 2;
  const int64_t nth = SeededStep(2, 6, 12);
  ASSERT_TRUE(StartWithServerFlags(c, job, {{}, {"--test_crash_on", "snapshot:" + std::to_string(nth)}, {}},
                                   {"--dump_dir", c.dir() + "/dump"})
                  .ok());
  EXPECT_EQ(c.Wait("ps1", milliseconds(60000)), 9) << c.Log("ps1");
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("(no rollback)"), std::string::npos) << log;
  EXPECT_EQ(log.find("rolling back"), std::string::npos) << log;
  for (const char* p : {"ps0", "ps2"}) EXPECT_EQ(c.Wait(p, milliseconds(10000)), 0) << c.Log(p);
  ExpectTrainersFinished(c);
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kSteps));
  ExpectSameParameters(c);
  EXPECT_GE(ExpectBackupsEqualPrimaries(c.dir() + "/dump"), 3);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, KilledServerWithReplicasInAsyncModeCostsNoRollback) {
  const std::string root = TempRoot("kill_replicated_async");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_kill_replicated_async");
  json job = Job(root);
  job["cluster"]["replicas"] = 2;
  job["training"]["consistency"] = "async";
  ASSERT_TRUE(c.StartJob(job, 3, 2).ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(kEvery + 5, kSteps / 2, 13), milliseconds(60000))) << c.Log("master");
  c.Kill("ps0", SIGKILL);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  const std::string log = c.Log("master");
  EXPECT_NE(log.find("(no rollback)"), std::string::npos) << log;
  EXPECT_EQ(log.find("rolling back"), std::string::npos) << log;
  // Async pushes apply in arrival order, so no comparison with another run;
  // but every step is trained once and the job ends.
  ExpectTrainersFinished(c);
  EXPECT_EQ(c.Metrics(0).size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(c.Metrics(1).size(), static_cast<size_t>(kSteps));
  std::filesystem::remove_all(root);
}

// One trainer in async mode sees every update of its own before its next
// lookup (a prefetched one waits at the server for its push), so its run is
// as deterministic as a sync one: a server killed at a seeded step rolls the
// job back, and it ends with the undisturbed run's parameters, bit for bit.
TEST(ElasticTest, KilledServerInAsyncModeWithOneTrainerEndsLikeAnUndisturbedRun) {
  auto job_of = [](const std::string& root) {
    json job = Job(root);
    job["training"]["consistency"] = "async";
    return job;
  };
  auto config = ParseJobConfigJson(job_of(""), "");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->training.prefetch);  // the default: what this test is about

  const std::string undisturbed_root = TempRoot("async_one_undisturbed");
  std::filesystem::remove_all(undisturbed_root);
  testing::LocalCluster u("elastic_async_one_undisturbed");
  ASSERT_TRUE(u.StartJob(job_of(undisturbed_root), 2, 1, {"--dump_dir", u.dir() + "/dump"}).ok());
  ASSERT_EQ(u.Wait("master", milliseconds(120000)), 0) << u.Log("master");
  // Every process ends by itself (a sanitized one reports at exit: killing
  // it then would cut its report short).
  for (const char* p : {"ps0", "ps1", "trainer0"}) EXPECT_EQ(u.Wait(p, milliseconds(20000)), 0) << u.Log(p);
  auto want = testing::ReadDump(u.dir() + "/dump", *config);
  ASSERT_TRUE(want.ok()) << want.status();
  std::filesystem::remove_all(undisturbed_root);

  const std::string root = TempRoot("async_one_kill");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_async_one_kill");
  ASSERT_TRUE(c.StartJob(job_of(root), 2, 1, {"--dump_dir", c.dir() + "/dump"}).ok());
  ASSERT_TRUE(c.WaitForSteps(0, SeededStep(kEvery + 5, kSteps / 2, 17), milliseconds(60000))) << c.Log("master");
  c.Kill("ps1", SIGKILL);
  ASSERT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master") << c.Log("trainer0");
  EXPECT_NE(c.Log("master").find("rolling back to step"), std::string::npos) << c.Log("master");
  for (const char* p : {"ps0", "trainer0"}) EXPECT_EQ(c.Wait(p, milliseconds(20000)), 0) << c.Log(p);
  auto got = testing::ReadDump(c.dir() + "/dump", *config);
  ASSERT_TRUE(got.ok()) << got.status();
  std::string where;
  const double diff = testing::MaxDifference(*want, *got, &where);
  std::cout << "max |changed - undisturbed| = " << diff << " (" << where << ")\n";
  EXPECT_EQ(diff, 0.0) << where;
  EXPECT_GT(got->rows.at("rows").size(), 50u);
  std::filesystem::remove_all(root);
}

TEST(ElasticTest, BadRemoveRequestsAreRefusedAndChangeNothing) {
  const std::string root = TempRoot("bad_remove");
  std::filesystem::remove_all(root);
  testing::LocalCluster c("elastic_bad_remove");
  json job = Job(root);
  job["training"]["steps"] = 1000000;
  ASSERT_TRUE(c.StartJob(job, 1, 2).ok());
  ASSERT_TRUE(c.WaitForSteps(0, 5, milliseconds(60000))) << c.Log("master");
  std::string out;
  EXPECT_EQ(c.Control({"remove_ps", "7"}, &out), 1);
  EXPECT_NE(out.find("not in the job"), std::string::npos) << out;
  EXPECT_EQ(c.Control({"remove_ps", "0"}, &out), 1);  // the last server
  EXPECT_NE(out.find("the job's last"), std::string::npos) << out;
  EXPECT_EQ(c.Control({"remove_ps", "zero"}, &out), 1);
  EXPECT_EQ(c.Control({"remove_ps"}, &out), 1);
  // The job goes on, on its one server, in its first generation.
  const size_t done = c.Metrics(0).size();
  ASSERT_TRUE(c.WaitForSteps(0, done + 10, milliseconds(30000))) << c.Log("master");
  EXPECT_EQ(c.Metrics(0).back()["generation"], 1);
  EXPECT_TRUE(c.Running("ps0"));
  c.Kill("master", SIGTERM);
  EXPECT_EQ(c.Wait("master", milliseconds(20000)), 1);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessera
