// Every role's Prometheus endpoint (--metrics_port), scraped while a real job
// trains: the trainer's figures must be exactly those of its metrics JSONL up
// to the step the scrape saw, and the servers' and master's must describe
// the running job (its requests, shards, tiers, members).
#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Samples = std::map<std::string, double>;  // "name{labels}" -> value

constexpr int64_t kSteps = 600;

json Job() {
  auto table = [](const std::string& name, int rows, int dim) {
    return json{{"name", name}, {"num_embeddings", rows}, {"embedding_dim", dim}, {"feature_names", {name}}};
  };
  return json{{"name", "metrics-test"},
              {"cluster", {{"num_ps", 2}, {"num_trainers", 2}}},
              {"tables", {table("users", 5000, 16), table("items", 2000, 8)}},
              {"model", {{"num_dense_features", 4}, {"bottom_mlp", {16, 8}}, {"top_mlp", {16, 1}}}},
              {"data", {{"source", "synthetic"}, {"num_examples", 20000}, {"ids_per_bag", 4}, {"zipf", 1.05}}},
              {"training",
               {{"batch_size", 64},
                {"steps", kSteps},
                {"consistency", "sync"},
                {"dense_optimizer", {{"type", "sgd"}, {"lr", 0.1}}},
                {"sparse_optimizer", {{"type", "adagrad"}, {"lr", 0.1}}},
                {"seed", 7},
                {"log_every", 20}}},
              {"runtime", {{"heartbeat_ms", 200}, {"peer_timeout_ms", 5000}}}};
}

// The port a role logged it serves metrics on.
std::optional<int> MetricsPort(const std::string& log) {
  static const std::regex url(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)");
  std::smatch m;
  if (!std::regex_search(log, m, url)) return std::nullopt;
  return std::stoi(m[1]);
}

// A scrape's samples; checks the text is well formed on the way: every
// sample belongs to a family declared by # TYPE before it.
std::optional<Samples> Scrape(int port, std::string* error) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) {
    *error = res ? "status " + std::to_string(res->status) : httplib::to_string(res.error());
    return std::nullopt;
  }
  Samples samples;
  std::set<std::string> families;
  std::istringstream in(res->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_TRUE(families.insert(name).second) << "family declared twice: " << line;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    std::string name = key.substr(0, key.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!families.count(name) && name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name = name.substr(0, name.size() - s.size());
      }
    }
    EXPECT_TRUE(families.count(name)) << "sample before its # TYPE: " << line;
    EXPECT_TRUE(samples.emplace(key, std::stod(line.substr(space + 1))).second) << "sample twice: " << line;
  }
  return samples;
}

double Get(const Samples& s, const std::string& key) {
  auto it = s.find(key);
  EXPECT_NE(it, s.end()) << "no sample " << key;
  return it == s.end() ? std::nan("") : it->second;
}

TEST(MetricsTest, EveryRoleServesPrometheusTextThatAgreesWithTheJob) {
  testing::LocalCluster c("metrics");
  ASSERT_TRUE(c.StartMaster(Job(), {"--metrics_port", "0"}).ok());
  // Server 1 keeps most rows in RocksDB: a host tier with evictions below it.
  ASSERT_TRUE(c.StartPs(0, {"--metrics_port", "0"}).ok());
  ASSERT_TRUE(
      c.StartPs(1, {"--metrics_port", "0", "--rocksdb_path", c.dir() + "/rocks1", "--host_bytes", "40000",
                            "--write_back_bytes", "4096"})  // buffers of a few dozen rows: rows reach RocksDB
                  .ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.StartTrainer(r, 2, "", {"--metrics_port", "0"}).ok());

  std::map<std::string, int> ports;
  for (const std::string name : {"master", "ps0", "ps1", "trainer0", "trainer1"}) {
    ASSERT_TRUE(c.WaitForLog(name, "metrics on http://", milliseconds(30000))) << c.Log(name);
    const auto port = MetricsPort(c.Log(name));
    ASSERT_TRUE(port.has_value()) << c.Log(name);
    ports[name] = *port;
  }
  ASSERT_TRUE(c.WaitForSteps(0, 20, milliseconds(60000))) << c.Log("master");

  // Scrape every role while the job trains; keep each one's last good
  // scrape, and for the servers also an earlier one.
  std::map<std::string, Samples> last, first;
  int trainer_scrapes = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (c.Running("trainer0") && std::chrono::steady_clock::now() < deadline) {
    for (const auto& [name, port] : ports) {
      std::string error;
      auto s = Scrape(port, &error);
      if (!s) continue;  // the role ended between the check and the scrape
      if (!first.count(name)) first[name] = *s;
      last[name] = std::move(*s);
      trainer_scrapes += name == "trainer0";
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(c.Wait("master", milliseconds(60000)), 0) << c.Log("master");
  ASSERT_GE(trainer_scrapes, 2);
  for (const std::string name : {"master", "ps0", "ps1", "trainer0"}) ASSERT_TRUE(last.count(name)) << name;

  // The trainer: its last scrape against its JSONL, which is complete now.
  const Samples& t = last["trainer0"];
  const std::vector<json> lines = c.Metrics(0);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  const double steps = Get(t, "tessera_trainer_steps_total{rank=\"0\"}");
  ASSERT_GE(steps, 1);
  ASSERT_LE(steps, kSteps);
  const auto n = static_cast<size_t>(steps);
  EXPECT_EQ(Get(t, "tessera_trainer_step{rank=\"0\"}"), static_cast<double>(n - 1));
  EXPECT_EQ(Get(t, "tessera_trainer_loss{rank=\"0\"}"), lines[n - 1]["loss"].get<double>());
  EXPECT_EQ(Get(t, "tessera_trainer_step_seconds_count{rank=\"0\"}"), steps);
  double examples = 0, sent = 0, received = 0;
  std::map<std::string, double> phase_s;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(lines[i]["step"].get<int64_t>(), static_cast<int64_t>(i));
    examples += lines[i]["examples"].get<double>();
    sent += lines[i]["lookup_bytes_sent"].get<double>();
    received += lines[i]["lookup_bytes_received"].get<double>();
    for (const char* phase : {"data", "lookup", "dense", "allreduce", "push"}) {
      phase_s[phase] += lines[i][std::string(phase) + "_ms"].get<double>() / 1e3;
    }
  }
  EXPECT_EQ(Get(t, "tessera_trainer_examples_total{rank=\"0\"}"), examples);
  EXPECT_EQ(Get(t, "tessera_trainer_lookup_sent_bytes_total{rank=\"0\"}"), sent);
  EXPECT_EQ(Get(t, "tessera_trainer_lookup_received_bytes_total{rank=\"0\"}"), received);
  for (const auto& [phase, seconds] : phase_s) {
    const double got = Get(t, "tessera_trainer_phase_seconds_total{rank=\"0\",phase=\"" + phase + "\"}");
    EXPECT_NEAR(got, seconds, 1e-9 * std::max(1.0, seconds)) << phase;
  }
  EXPECT_GT(Get(t, "tessera_process_resident_memory_bytes{role=\"trainer\"}"), 1e6);

  // The servers: requests by opcode, shards, tiers; counters only grow.
  for (const std::string ps : {"ps0", "ps1"}) {
    const Samples& s = last[ps];
    const std::string lookups = "tessera_rpc_requests_total{role=\"ps\",op=\"LOOKUP\"}";
    EXPECT_GT(Get(s, lookups), 0) << ps;
    EXPECT_GE(Get(s, lookups), Get(first[ps], lookups)) << ps;
    EXPECT_GT(Get(s, "tessera_rpc_requests_total{role=\"ps\",op=\"PUSH_GRADIENTS\"}"), 0) << ps;
    EXPECT_EQ(Get(s, "tessera_rpc_latency_seconds_count{role=\"ps\",op=\"LOOKUP\"}"), Get(s, lookups)) << ps;
    EXPECT_GT(Get(s, "tessera_rpc_received_bytes_total{role=\"ps\",op=\"LOOKUP\"}"), 0) << ps;
    EXPECT_GT(Get(s, "tessera_ps_ids_looked_up_total"), 0) << ps;
    EXPECT_EQ(Get(s, "tessera_ps_refused_requests_total"), 0) << ps;
    EXPECT_GT(Get(s, "tessera_process_resident_memory_bytes{role=\"ps\"}"), 1e6) << ps;
  }
  // Server 1's tiers: a host tier that evicts into RocksDB, which is written.
  const Samples& p1 = last["ps1"];
  double host_hits = 0, evictions = 0, rocks_written = 0, stalls_seen = 0;
  for (const auto& [key, value] : p1) {
    if (key.rfind("tessera_ps_tier_hits_total{", 0) == 0 && key.find("tier=\"host\"") != std::string::npos) {
      host_hits += value;
    }
    if (key.rfind("tessera_ps_tier_evictions_total{", 0) == 0 && key.find("tier=\"host\"") != std::string::npos) {
      evictions += value;
    }
    if (key.rfind("tessera_ps_rocksdb_written_rows_total{", 0) == 0) rocks_written += value;
    if (key.rfind("tessera_ps_rocksdb_write_stalls_total{", 0) == 0) ++stalls_seen;
  }
  EXPECT_GT(host_hits, 0);
  EXPECT_GT(evictions, 0);
  EXPECT_GT(rocks_written, 0);
  EXPECT_GT(stalls_seen, 0);

  // The master: the job as it ran.
  const Samples& m = last["master"];
  EXPECT_EQ(Get(m, "tessera_job_servers{status=\"ready\"}"), 2);
  EXPECT_EQ(Get(m, "tessera_job_trainers{status=\"registered\"}"), 2);
  EXPECT_GE(Get(m, "tessera_job_plan_version"), 1);
  EXPECT_GT(Get(m, "tessera_rpc_requests_total{role=\"master\",op=\"HEARTBEAT\"}"), 0);
  const double job_step = Get(m, "tessera_job_step");
  EXPECT_GE(job_step, 20);
  EXPECT_LE(job_step, kSteps);
  EXPECT_EQ(Get(m, "tessera_job_steps"), kSteps);
  EXPECT_TRUE(std::isfinite(Get(m, "tessera_job_loss")));
  EXPECT_EQ(Get(m, "tessera_job_state{state=\"running\"}") + Get(m, "tessera_job_state{state=\"done\"}"), 1);
  EXPECT_EQ(Get(m, "tessera_job_checkpoint_failures_total"), 0);
}

TEST(MetricsTest, APortInUseStopsTheRoleWithAClearError) {
  testing::LocalCluster c("metrics_port_in_use");
  ASSERT_TRUE(c.StartMaster(Job(), {"--metrics_port", "0"}).ok());
  ASSERT_TRUE(c.WaitForLog("master", "metrics on http://", milliseconds(30000))) << c.Log("master");
  const auto port = MetricsPort(c.Log("master"));
  ASSERT_TRUE(port.has_value());
  ASSERT_TRUE(c.StartPs(0, {"--metrics_port", std::to_string(*port)}).ok());
  EXPECT_EQ(c.Wait("ps0", milliseconds(30000)), 1) << c.Log("ps0");
  EXPECT_NE(c.Log("ps0").find("cannot bind the metrics endpoint"), std::string::npos) << c.Log("ps0");
}

}  // namespace
}  // namespace tessera
