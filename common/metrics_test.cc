#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics_http.h"
#include "common/prometheus_text.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "tests/support/raw_tcp.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

bool Contains(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

TEST(PrometheusTextTest, GroupsEachFamilysSamplesUnderOneHeaderAndEscapesLabels) {
  PrometheusText t;
  t.Counter("tessera_x_total", "X.", {{"table", "a"}}, 3);
  t.Gauge("tessera_y", "Y.", {}, 0.25);
  t.Counter("tessera_x_total", "other help", {{"table", "b\"q\\\n"}}, 1e20);
  EXPECT_EQ(t.Render(),
            "# HELP tessera_x_total X.\n"
            "# TYPE tessera_x_total counter\n"
            "tessera_x_total{table=\"a\"} 3\n"
            "tessera_x_total{table=\"b\\\"q\\\\\\n\"} 1e+20\n"
            "# HELP tessera_y Y.\n"
            "# TYPE tessera_y gauge\n"
            "tessera_y 0.25\n");
}

TEST(PrometheusTextTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  LatencyHistogram h;
  h.Observe(5e-5);   // first bucket
  h.Observe(1e-3);   // on a bound: counts in it (le is <=)
  h.Observe(100.0);  // above every bound
  PrometheusText t;
  h.Write(&t, "tessera_lat_seconds", "L.", {{"op", "LOOKUP"}});
  const std::string text = t.Render();
  EXPECT_TRUE(Contains(text, "# TYPE tessera_lat_seconds histogram\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_bucket{op=\"LOOKUP\",le=\"1e-04\"} 1\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_bucket{op=\"LOOKUP\",le=\"5e-04\"} 1\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_bucket{op=\"LOOKUP\",le=\"0.001\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_bucket{op=\"LOOKUP\",le=\"10\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_bucket{op=\"LOOKUP\",le=\"+Inf\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_count{op=\"LOOKUP\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_lat_seconds_sum{op=\"LOOKUP\"} 100.00105")) << text;
}

TEST(MetricsHttpServerTest, ServesTheRegistryAtSlashMetricsAndNothingElse) {
  MetricsRegistry registry("ps");
  int scrapes = 0;
  registry.Add([&](PrometheusText* t) { t->Counter("tessera_scrapes_total", "Scrapes.", {}, ++scrapes); });
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(5, 0);
  for (int i = 1; i <= 2; ++i) {
    auto res = client.Get("/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_TRUE(Contains(res->get_header_value("Content-Type"), "text/plain")) << res->get_header_value("Content-Type");
    EXPECT_TRUE(Contains(res->body, "tessera_scrapes_total " + std::to_string(i) + "\n")) << res->body;
    EXPECT_TRUE(Contains(res->body, "tessera_process_resident_memory_bytes{role=\"ps\"} ")) << res->body;
    EXPECT_TRUE(Contains(res->body, "tessera_process_cpu_seconds_total{role=\"ps\"} ")) << res->body;
  }
  auto other = client.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200);
  EXPECT_EQ(scrapes, 2);
}

TEST(MetricsHttpServerTest, APortInUseIsAClearError) {
  MetricsRegistry registry("ps");
  auto first = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start("127.0.0.1", (*first)->port(), &registry);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(Contains(second.status().message(), "cannot bind")) << second.status();
  EXPECT_FALSE(MetricsHttpServer::Start("127.0.0.1", 70000, &registry).ok());
}

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A stranger who can reach the endpoint must not take the descriptors the
// role's RocksDB files and sockets need: silent connections are accepted
// only a few at a time, and scrapes are answered again once they go.
TEST(MetricsHttpServerTest, AFloodOfSilentConnectionsHoldsFewDescriptorsAndScrapesResumeAfterIt) {
  MetricsRegistry registry("ps");
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int before = OpenDescriptors();
  constexpr int kFlood = 300;
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    // Without waiting: past the backlog the server leaves, a connect would wait for good.
    const int fd =
        testing::SilentConnection("127.0.0.1", "127.0.0.1", (*server)->port(), testing::Connect::kDontWait);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    flood.push_back(fd);
  }
  // Long enough for an unbounded queue to accept every one of them.
  std::this_thread::sleep_for(milliseconds(1500));
  const int held_by_server = OpenDescriptors() - before - kFlood;
  for (int fd : flood) close(fd);
  // Two answered, eight waiting, one answered by the accepting thread.
  EXPECT_LE(held_by_server, kMetricsThreads + static_cast<int>(kMetricsWaitingConnections) + 1);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(30, 0);
  client.set_read_timeout(30, 0);
  const auto start = std::chrono::steady_clock::now();
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(MetricsAddressTest, FollowsTheRolesBindUnlessGiven) {
  EXPECT_EQ(MetricsAddress("10.0.0.5", "tcp://127.0.0.1:0"), "10.0.0.5");
  EXPECT_EQ(MetricsAddress("", "tcp://127.0.0.1:5555"), "127.0.0.1");
  EXPECT_EQ(MetricsAddress("", "tcp://*:5555"), "0.0.0.0");
  EXPECT_EQ(MetricsAddress("", "tcp://0.0.0.0:0"), "0.0.0.0");
  EXPECT_EQ(MetricsAddress("", "tcp://[::1]:5555"), "::1");
  EXPECT_EQ(MetricsAddress("", ""), "127.0.0.1");
}

TEST(RpcServerMetricsTest, CountsRequestsErrorsAndBytesPerOpcode) {
  RpcServerOptions options;
  auto server = RpcServer::Start(options, [](Message&& m, Responder r) {
    if (m.header.op == Opcode::kHeartbeat) {
      r.ReplyOk();
    } else {
      r.ReplyError(Status::InvalidArgument("no"));
    }
  });
  ASSERT_TRUE(server.ok());
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect((*server)->endpoint());
  ASSERT_TRUE(peer.ok());
  for (int i = 0; i < 3; ++i) {
    Message m(Opcode::kHeartbeat);
    m.AddString("0123456789");
    ASSERT_TRUE((*client)->Call(*peer, std::move(m), milliseconds(5000)).Wait().ok());
  }
  EXPECT_FALSE((*client)->Call(*peer, Message(Opcode::kLookup), milliseconds(5000)).Wait().ok());
  PrometheusText t;
  (*server)->WriteMetrics(&t, {{"role", "test"}});
  const std::string text = t.Render();
  EXPECT_TRUE(Contains(text, "tessera_rpc_requests_total{role=\"test\",op=\"HEARTBEAT\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_rpc_errors_total{role=\"test\",op=\"HEARTBEAT\"} 0\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_rpc_errors_total{role=\"test\",op=\"LOOKUP\"} 1\n")) << text;
  // Three requests of a 24-byte header and a 10-byte frame.
  EXPECT_TRUE(Contains(text, "tessera_rpc_received_bytes_total{role=\"test\",op=\"HEARTBEAT\"} 102\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_rpc_latency_seconds_count{role=\"test\",op=\"HEARTBEAT\"} 3\n")) << text;
  EXPECT_TRUE(Contains(text, "tessera_rpc_queued_requests{role=\"test\"} 0\n")) << text;
}

// The figure after `key` and a space, on the line that starts with it; or -1.
double Sample(const std::string& text, const std::string& key) {
  const size_t at = text.find("\n" + key + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size() + 2));
}

TEST(RpcServerMetricsTest, AScrapeWhileRequestsAreAnsweredCountsThemOnce) {
  RpcServerOptions options;
  options.worker_threads = 2;
  auto server = RpcServer::Start(options, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(server.ok());
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect((*server)->endpoint());
  ASSERT_TRUE(peer.ok());
  std::atomic<bool> done{false};
  std::thread load([&] {
    while (!done.load()) {
      std::vector<RpcFuture> calls;
      for (int i = 0; i < 16; ++i) {
        calls.push_back((*client)->Call(*peer, Message(Opcode::kHeartbeat), milliseconds(5000)));
      }
      for (RpcFuture& c : calls) (void)c.Wait();
    }
  });
  int scrapes = 0;
  const auto end = std::chrono::steady_clock::now() + milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    PrometheusText t;
    (*server)->WriteMetrics(&t, {{"role", "test"}});
    const std::string text = "\n" + t.Render();
    const double requests = Sample(text, "tessera_rpc_requests_total{role=\"test\",op=\"HEARTBEAT\"}");
    if (requests < 0) continue;  // none answered yet
    ASSERT_EQ(requests, Sample(text, "tessera_rpc_latency_seconds_count{role=\"test\",op=\"HEARTBEAT\"}"))
        << "scrape " << scrapes;
    ++scrapes;
  }
  done = true;
  load.join();
  EXPECT_GT(scrapes, 100);
}

}  // namespace
}  // namespace tessera
