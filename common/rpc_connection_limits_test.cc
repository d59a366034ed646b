// RpcServer's limits on connections (ConnectionLimits: per peer address and
// in all) over real sockets on 127.0.0.1, plain and with keys.
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "tests/support/raw_tcp.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

class ConnectionLimitsTest : public ::testing::TestWithParam<bool> {
 protected:
  bool with_keys() const { return GetParam(); }

  void SetUp() override {
    if (with_keys()) {
      char tmpl[] = "/tmp/tessera_rpc_limits_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
      ASSERT_TRUE(JobKeys::Write(dir_).ok());
    }
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void StartServer(int64_t per_peer, int64_t total, int64_t handshake_timeout_ms = 10000) {
    RpcServerOptions options;
    options.worker_threads = 1;
    options.connections.per_peer = per_peer;
    options.connections.total = total;
    options.connections.handshake_timeout_ms = handshake_timeout_ms;
    if (with_keys()) options.keys = JobKeys::Load(dir_, Role::kMaster).value();
    auto server = RpcServer::Start(options, [this](Message&&, Responder r) {
      ++served_;
      r.ReplyOk();
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  struct Member {
    std::unique_ptr<RpcClient> client;
    int peer = -1;
  };
  // A client connected to the server, from `source` (a loopback address) when
  // given.
  Member Connect(const std::string& source = "") {
    std::shared_ptr<const JobKeys> keys;
    if (with_keys()) keys = JobKeys::Load(dir_, Role::kTrainer).value();
    Member m;
    m.client = RpcClient::Create(keys).value();
    std::string endpoint = server_->endpoint();
    // libzmq's "tcp://SOURCE:0;HOST:PORT": connect from SOURCE.
    if (!source.empty()) endpoint = "tcp://" + source + ":0;" + endpoint.substr(6);
    m.peer = m.client->Connect(endpoint, with_keys() ? Role::kMaster : Role::kNone).value();
    return m;
  }
  int port() const {
    const std::string& endpoint = server_->endpoint();
    return std::atoi(endpoint.c_str() + endpoint.rfind(':') + 1);
  }
  static Status Call(Member& m, milliseconds deadline = milliseconds(10000)) {
    return m.client->CallSync(m.peer, Message(Opcode::kHeartbeat), deadline).status();
  }

  // A new client's call, tried again until one is served (the server may
  // not yet have read the closes that made room) or 50 tries failed.
  Status NewcomerServed() {
    Status in;
    for (int attempt = 0; attempt < 50; ++attempt) {
      Member m = Connect();
      in = Call(m, milliseconds(5000));
      if (in.ok()) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return in;
  }

  // The server's metrics text.
  std::string Metrics() const {
    PrometheusText text;
    server_->WriteMetrics(&text, {{"role", "test"}});
    return text.Render();
  }

  std::string dir_;
  std::unique_ptr<RpcServer> server_;
  std::atomic<int> served_{0};
};

TEST_P(ConnectionLimitsTest, OneConnectionOverAHostsLimitIsRefusedWithItsReasonAndRoomComesBack) {
  StartServer(/*per_peer=*/2, /*total=*/0);
  Member a = Connect(), b = Connect();
  ASSERT_TRUE(Call(a).ok());
  ASSERT_TRUE(Call(b).ok());
  // A third from the same host: refused in its handshake, at once, saying why.
  Member c = Connect();
  const auto start = std::chrono::steady_clock::now();
  const Status refused = Call(c, milliseconds(20000));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("max_connections_per_peer"), std::string::npos) << refused;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(c.client->DescribeLink(c.peer).find("too many connections"), std::string::npos);
  EXPECT_NE(Metrics().find("tessera_rpc_refused_connections_total{role=\"test\",limit=\"per_peer\"} 1"),
            std::string::npos)
      << Metrics();
  // Another host is not held to this one's limit.
  Member other = Connect("127.0.0.2");
  EXPECT_TRUE(Call(other).ok());
  // Those already in go on being served.
  EXPECT_TRUE(Call(a).ok());
  EXPECT_EQ(served_.load(), 4);

  // Once one leaves, a new one gets in (the server counts the closes).
  a.client.reset();
  c.client.reset();
  const Status in = NewcomerServed();
  EXPECT_TRUE(in.ok()) << in;
}

TEST_P(ConnectionLimitsTest, AFloodOfSilentConnectionsIsCutAtTheTotalAndTheMembersAreStillServed) {
  constexpr int kTotal = 4, kFlood = 40;
  StartServer(/*per_peer=*/0, kTotal);
  Member member = Connect();
  ASSERT_TRUE(Call(member).ok());
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = testing::SilentConnection("127.0.0.1", "127.0.0.1", port());
    ASSERT_GE(fd, 0);
    flood.push_back(fd);
  }
  // All but the room left (the member holds one) are closed as accepted.
  int cut = 0;
  for (int fd : flood) cut += testing::ClosedByPeer(fd, milliseconds(1000));
  EXPECT_EQ(cut, kFlood - (kTotal - 1));
  EXPECT_NE(Metrics().find("tessera_rpc_open_connections{role=\"test\"} " + std::to_string(kTotal)), std::string::npos)
      << Metrics();
  EXPECT_TRUE(Call(member).ok());
  // A newcomer does not get in while the flood holds the room...
  Member late = Connect();
  EXPECT_FALSE(Call(late, milliseconds(1500)).ok());
  // ... and does once it ends.
  for (int fd : flood) close(fd);
  const Status in = NewcomerServed();
  EXPECT_TRUE(in.ok()) << in;
  EXPECT_TRUE(Call(member).ok());
}

TEST_P(ConnectionLimitsTest, ConnectionsThatNeverHandshakeAreClosedAfterTheHandshakeTimeout) {
  StartServer(/*per_peer=*/2, /*total=*/0, /*handshake_timeout_ms=*/500);
  Member member = Connect();
  ASSERT_TRUE(Call(member).ok());
  // Silent connections from the member's own host take the rest of its
  // room and more...
  std::vector<int> silent;
  for (int i = 0; i < 2; ++i) silent.push_back(testing::SilentConnection("127.0.0.1", "127.0.0.1", port()));
  ASSERT_GE(silent[0], 0);
  ASSERT_GE(silent[1], 0);
  // ... until the server closes them, half a second after their accept
  // (libzmq's default would hold them 30 s).
  const auto start = std::chrono::steady_clock::now();
  for (int fd : silent) EXPECT_TRUE(testing::ClosedByPeer(fd, milliseconds(5000)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int fd : silent) close(fd);
  // The member's connection, older than they were, is not touched, and a
  // newcomer from the host gets the room again.
  EXPECT_TRUE(Call(member).ok());
  const Status in = NewcomerServed();
  EXPECT_TRUE(in.ok()) << in;
}

INSTANTIATE_TEST_SUITE_P(Transport, ConnectionLimitsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Curve" : "Plain"; });

}  // namespace
}  // namespace tessera
