// Checkpoints on real processes: resuming gives the parameters a run that
// never stopped reaches (also onto more servers than the checkpoint was taken
// with); a master killed in the middle of a checkpoint leaves the previous one
// loadable; checkpoints on demand (a command to the master, SIGUSR1).
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/job_config.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/test_jobs.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

json Config(const std::string& ckpt_dir, int64_t steps, int64_t every) {
  return testing::StatefulSyncJob("checkpoint-test", ckpt_dir, steps, every);
}

// Runs a job to its end; returns the master's exit code.
int RunJob(testing::LocalCluster& cluster, const json& config, int num_ps, std::vector<std::string> master_args) {
  Status st = cluster.StartJob(config, num_ps, 2, master_args);
  EXPECT_TRUE(st.ok()) << st;
  return cluster.Wait("master", milliseconds(120000));
}

class ResumeTest : public ::testing::TestWithParam<int> {};

TEST_P(ResumeTest, ResumedRunMatchesARunThatNeverStopped) {
  const int resume_servers = GetParam();
  const std::string root = std::filesystem::temp_directory_path() / ("tessera_resume_" + std::to_string(getpid()) +
                                                                      "_" + std::to_string(resume_servers));
  std::filesystem::remove_all(root);

  // A: 12 steps straight.
  testing::LocalCluster a("resume_a");
  ASSERT_EQ(RunJob(a, Config(root + "/a", 12, 0), 2, {"--dump_dir", a.dir() + "/dump"}), 0) << a.Log("master");
  // B: 8 steps with a checkpoint at step 6, on 2 servers.
  testing::LocalCluster b("resume_b");
  ASSERT_EQ(RunJob(b, Config(root + "/b", 8, 6), 2, {}), 0) << b.Log("master");
  ASSERT_TRUE(std::filesystem::exists(root + "/b/ckpt-000000000006/manifest.json")) << b.Log("master");
  // C: resume B's checkpoint, on resume_servers servers, to step 12.
  testing::LocalCluster c("resume_c");
  ASSERT_EQ(RunJob(c, Config(root + "/b", 12, 0), resume_servers, {"--resume", "--dump_dir", c.dir() + "/dump"}), 0)
      << c.Log("master") << c.Log("ps0") << c.Log("trainer0");
  EXPECT_NE(c.Log("master").find("resuming from"), std::string::npos);
  const auto metrics = c.Metrics(0);
  ASSERT_EQ(metrics.size(), 6u);
  EXPECT_EQ(metrics.front()["step"], 6);

  auto job = ParseJobConfigJson(Config("", 12, 0), "");
  ASSERT_TRUE(job.ok()) << job.status();
  auto da = testing::ReadDump(a.dir() + "/dump", *job);
  auto dc = testing::ReadDump(c.dir() + "/dump", *job);
  ASSERT_TRUE(da.ok() && dc.ok()) << da.status() << dc.status();
  std::string where;
  const double diff = testing::MaxDifference(*da, *dc, &where);
  std::cout << "resume onto " << resume_servers << " servers: max |resumed - straight| = " << diff << " (" << where
            << ")\n";
  EXPECT_EQ(diff, 0.0) << where;  // bit for bit, whatever the servers' count (plan_independent_pooling)
  EXPECT_GT(da->rows["rows"].size(), 50u);
  std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Servers, ResumeTest, ::testing::Values(2, 3),
                         [](const auto& info) { return "onto_" + std::to_string(info.param) + "_servers"; });

TEST(CheckpointTest, MasterKilledMidCheckpointLeavesThePreviousOneLoadable) {
  const std::string root =
      std::filesystem::temp_directory_path() / ("tessera_crash_ckpt_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  testing::LocalCluster first("crash_first");
  // Checkpoints at steps 3 and 6; the master dies inside the second.
  const int code = RunJob(first, Config(root, 50, 3), 2, {"--test_crash_in_checkpoint", "2"});
  EXPECT_EQ(code, 9) << first.Log("master");
  for (const char* p : {"ps0", "ps1", "trainer0", "trainer1"}) {
    EXPECT_NE(first.Wait(p, milliseconds(20000)), -1) << p << " outlived its master";
  }
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-000000000003/manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-000000000006/ps0"));  // the interrupted one
  EXPECT_FALSE(std::filesystem::exists(root + "/ckpt-000000000006/manifest.json"));

  testing::LocalCluster second("crash_second");
  ASSERT_EQ(RunJob(second, Config(root, 10, 0), 2, {"--resume"}), 0) << second.Log("master") << second.Log("ps0");
  EXPECT_NE(second.Log("master").find("at step 3"), std::string::npos) << second.Log("master");
  EXPECT_EQ(second.Metrics(0).front()["step"], 3);
  std::filesystem::remove_all(root);
}

// Damaged and moved checkpoints (issue 13): a clear error, or a load that
// is right, never rows silently re-initialised.
TEST(CheckpointTest, MovedFolderLoadsDamagedNewestIsNamedAndAMissingShardIsAnError) {
  const std::string root = std::filesystem::temp_directory_path() / ("tessera_damaged_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  testing::LocalCluster first("damaged_first");
  ASSERT_EQ(RunJob(first, Config(root + "/a", 8, 3), 2, {}), 0) << first.Log("master");
  // Moved: the whole folder elsewhere (manifests name their files relative
  // to their own folder).
  std::filesystem::rename(root + "/a", root + "/b");
  const std::string newest = root + "/b/ckpt-000000000006";
  ASSERT_TRUE(std::filesystem::exists(newest + "/manifest.json"));
  {
    std::ifstream in(newest + "/manifest.json");
    const json manifest = json::parse(in);
    for (const json& s : manifest["shards"]) EXPECT_EQ(s["path"].get<std::string>().rfind('/', 0), std::string::npos);
  }
  testing::LocalCluster moved("damaged_moved");
  ASSERT_EQ(RunJob(moved, Config(root + "/b", 10, 0), 2, {"--resume"}), 0) << moved.Log("master") << moved.Log("ps0");
  EXPECT_NE(moved.Log("master").find("at step 6"), std::string::npos) << moved.Log("master");

  // The newest manifest truncated: the one before is used, and the log says
  // which checkpoint was passed over.
  std::filesystem::resize_file(newest + "/manifest.json", 100);
  testing::LocalCluster truncated("damaged_truncated");
  ASSERT_EQ(RunJob(truncated, Config(root + "/b", 10, 0), 2, {"--resume"}), 0) << truncated.Log("master");
  const std::string log = truncated.Log("master");
  EXPECT_NE(log.find("checkpoint " + newest + " is damaged"), std::string::npos) << log;
  EXPECT_NE(log.find("at step 3"), std::string::npos) << log;

  // A file of the remaining checkpoint cut short, or its trainer state
  // changed: found from the manifest before anything loads, and named.
  const std::string older = root + "/b/ckpt-000000000003";
  std::string rows_file;
  for (const auto& e : std::filesystem::recursive_directory_iterator(older)) {
    if (e.path().filename() == "rows.bin") rows_file = e.path().string();
  }
  ASSERT_FALSE(rows_file.empty());
  std::filesystem::copy_file(rows_file, root + "/rows.bin.saved");
  std::filesystem::resize_file(rows_file, std::filesystem::file_size(rows_file) - 8);
  testing::LocalCluster cut("damaged_cut");
  EXPECT_EQ(RunJob(cut, Config(root + "/b", 10, 0), 2, {"--resume"}), 1);
  EXPECT_NE(cut.Log("master").find(rows_file + " has "), std::string::npos) << cut.Log("master");
  std::filesystem::copy_file(root + "/rows.bin.saved", rows_file, std::filesystem::copy_options::overwrite_existing);
  {
    std::fstream state(older + "/trainer.params", std::ios::in | std::ios::out | std::ios::binary);
    state.seekp(10);
    state.put('\x5a');
  }
  testing::LocalCluster changed("damaged_state");
  EXPECT_EQ(RunJob(changed, Config(root + "/b", 10, 0), 2, {"--resume"}), 1);
  EXPECT_NE(changed.Log("master").find("its trainer state"), std::string::npos) << changed.Log("master");

  // Every remaining checkpoint lacks a shard: an error that names it.
  for (const std::string& dir : {root + "/b/ckpt-000000000003"}) {
    std::ifstream in(dir + "/manifest.json");
    json manifest = json::parse(in);
    in.close();
    manifest["shards"].erase(manifest["shards"].begin());
    std::ofstream(dir + "/manifest.json") << manifest.dump();
  }
  testing::LocalCluster lacking("damaged_lacking");
  EXPECT_EQ(RunJob(lacking, Config(root + "/b", 10, 0), 2, {"--resume"}), 1);
  EXPECT_NE(lacking.Log("master").find("its manifest lacks shard"), std::string::npos) << lacking.Log("master");
  EXPECT_NE(lacking.Log("master").find("no usable checkpoint"), std::string::npos) << lacking.Log("master");
  std::filesystem::remove_all(root);
}

TEST(CheckpointTest, OnDemandByCommandAndBySignal) {
  const std::string root = std::filesystem::temp_directory_path() / ("tessera_ondemand_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  testing::LocalCluster cluster("on_demand");
  ASSERT_TRUE(cluster.StartJob(Config(root, 1000000, 0), 1, 2).ok());
  for (int i = 0; i < 600 && cluster.Metrics(0).size() < 10; ++i) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_GE(cluster.Metrics(0).size(), 10u) << cluster.Log("master");

  // tessera_master --control checkpoint --master <address>
  std::string out;
  EXPECT_EQ(cluster.Control({"checkpoint"}, &out), 0) << out;
  auto wait_for_checkpoints = [&](size_t n) {
    for (int i = 0; i < 400; ++i) {
      size_t count = 0;
      std::error_code ec;  // the folder appears with the first checkpoint
      for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
        count += std::filesystem::exists(e.path() / "manifest.json");
      }
      if (count >= n) return true;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
  };
  EXPECT_TRUE(wait_for_checkpoints(1)) << cluster.Log("master");
  cluster.Kill("master", SIGUSR1);
  EXPECT_TRUE(wait_for_checkpoints(2)) << cluster.Log("master");
  // Training goes on after each.
  const size_t steps = cluster.Metrics(0).size();
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_GT(cluster.Metrics(0).size(), steps);
  cluster.Kill("master", SIGTERM);
  EXPECT_EQ(cluster.Wait("master", milliseconds(20000)), 1);
  std::filesystem::remove_all(root);
}

// A bad block under the RocksDB tier's live files (every SST of both
// servers damaged once the job has checkpointed, on the file system of its
// checkpoints) loses nothing: the checkpoint owns its bytes, and a job
// resumed from it ends bit for bit like one that never stopped. With the
// SSTs hard-linked into the checkpoint, as RocksDB makes them, resuming
// failed with "Corruption: block checksum mismatch".
TEST(CheckpointTest, DamagedLiveRocksDbFilesLeaveTheCheckpointLoadable) {
  const std::string root = std::filesystem::temp_directory_path() / ("tessera_damaged_sst_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  testing::LocalCluster straight("damaged_sst_straight");
  ASSERT_EQ(RunJob(straight, Config(root + "/a", 12, 0), 2, {"--dump_dir", straight.dir() + "/dump"}), 0)
      << straight.Log("master");

  // Tiered servers with a few rows' room in memory: nearly every row lives
  // in RocksDB, beside the checkpoints.
  testing::LocalCluster tiered("damaged_sst_tiered");
  ASSERT_TRUE(tiered.StartJob(Config(root + "/b", 8, 6), 2, 2, {},
                              {"--rocksdb_path", root + "/rocks{i}", "--host_bytes", "2048"})
                  .ok());
  ASSERT_EQ(tiered.Wait("master", milliseconds(120000)), 0) << tiered.Log("master") << tiered.Log("ps0");
  for (const char* p : {"ps0", "ps1"}) ASSERT_EQ(tiered.Wait(p, milliseconds(20000)), 0) << tiered.Log(p);
  int damaged = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    const std::string path = e.path().string();
    if (e.path().extension() != ".sst" || path.find("/rocks") == std::string::npos) continue;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    const std::string junk(512, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    ASSERT_TRUE(f.good()) << path;
    ++damaged;
  }
  ASSERT_GT(damaged, 0) << "the tiered servers left no SST to damage";

  testing::LocalCluster resumed("damaged_sst_resumed");
  ASSERT_EQ(RunJob(resumed, Config(root + "/b", 12, 0), 2, {"--resume", "--dump_dir", resumed.dir() + "/dump"}), 0)
      << resumed.Log("master") << resumed.Log("ps0") << resumed.Log("ps1");
  EXPECT_EQ(resumed.Metrics(0).front()["step"], 6);
  auto job = ParseJobConfigJson(Config("", 12, 0), "");
  ASSERT_TRUE(job.ok()) << job.status();
  auto want = testing::ReadDump(straight.dir() + "/dump", *job);
  auto got = testing::ReadDump(resumed.dir() + "/dump", *job);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  std::string where;
  EXPECT_EQ(testing::MaxDifference(*want, *got, &where), 0.0) << where;
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessera
