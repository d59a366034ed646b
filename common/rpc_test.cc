// RpcServer and RpcClient over real sockets on 127.0.0.1.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "common/peer_pool.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/zmq_transport.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Echoes frame 0; op kAbort answers with an error; kCommand never answers
// until released; kServerStats drops the Responder.
class EchoFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 2}, [this](Message&& m, Responder r) {
      switch (m.header.op) {
        case Opcode::kAbort:
          r.ReplyError(Status::FailedPrecondition("nope"));
          return;
        case Opcode::kCommand: {
          std::lock_guard<std::mutex> lock(mu_);
          parked_.push_back(std::move(r));
          return;
        }
        case Opcode::kServerStats:
          return;  // Responder destroyed without a reply
        default: {
          Message reply;
          for (auto& f : m.frames) reply.AddBytes(f.data(), f.size());
          r.Reply(std::move(reply));
        }
      }
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    auto client = RpcClient::Create();
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
    auto peer = client_->Connect(server_->endpoint());
    ASSERT_TRUE(peer.ok());
    peer_ = *peer;
  }
  void TearDown() override {
    client_.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      parked_.clear();
    }
    server_.reset();
  }

  // Until a kCommand request is parked (or a second passed).
  void WaitForParked() {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!parked_.empty()) return;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  }

  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  int peer_ = -1;
  std::mutex mu_;
  std::vector<Responder> parked_;
};

TEST_F(EchoFixture, EchoesManyInFlight) {
  std::vector<RpcFuture> futures;
  for (int i = 0; i < 200; ++i) {
    Message m(Opcode::kHeartbeat);
    m.AddString("msg" + std::to_string(i));
    futures.push_back(client_->Call(peer_, std::move(m), milliseconds(5000)));
  }
  for (int i = 0; i < 200; ++i) {
    auto r = futures[i].Wait();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->frames.size(), 1u);
    EXPECT_EQ(r->frames[0].to_string(), "msg" + std::to_string(i));
  }
}

TEST_F(EchoFixture, ErrorReplyCarriesStatus) {
  auto r = client_->CallSync(peer_, Message(Opcode::kAbort), milliseconds(5000));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "nope");
}

TEST_F(EchoFixture, DeadlineExceededWhenNoReply) {
  auto start = std::chrono::steady_clock::now();
  auto r = client_->CallSync(peer_, Message(Opcode::kCommand), milliseconds(150));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(EchoFixture, DeferredReplyFromAnotherThread) {
  RpcFuture f = client_->Call(peer_, Message(Opcode::kCommand), milliseconds(5000));
  WaitForParked();
  std::thread t([this] {
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_EQ(parked_.size(), 1u);
    parked_[0].ReplyOk();
  });
  t.join();
  EXPECT_TRUE(f.Wait().ok());
}

// A handler hands a parked request to another worker with Post: it is
// answered from there while the posting worker is still busy.
TEST_F(EchoFixture, PostedTasksRunOnAnotherWorker) {
  RpcFuture parked = client_->Call(peer_, Message(Opcode::kCommand), milliseconds(5000));
  WaitForParked();
  std::shared_ptr<Responder> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_EQ(parked_.size(), 1u);
    r = std::make_shared<Responder>(std::move(parked_[0]));
    parked_.clear();
  }
  std::promise<std::thread::id> ran_on;
  const auto poster = std::this_thread::get_id();
  server_->Post([r, &ran_on] {
    ran_on.set_value(std::this_thread::get_id());
    r->ReplyOk();
  });
  EXPECT_TRUE(parked.Wait().ok());
  EXPECT_NE(ran_on.get_future().get(), poster);
  // Requests still flow around posted tasks.
  EXPECT_TRUE(client_->CallSync(peer_, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
}

// A server without workers runs a posted task at once; one that stops
// destroys the tasks still waiting, and a parked request they held is
// answered, not left to its deadline.
TEST(RpcServerTest, PostRunsInlineWithoutWorkersAndStopDropsWaitingTasks) {
  auto inline_server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 0}, [](Message&&, Responder r) {
    r.ReplyOk();
  });
  ASSERT_TRUE(inline_server.ok()) << inline_server.status();
  bool ran = false;
  (*inline_server)->Post([&ran] { ran = true; });
  EXPECT_TRUE(ran);

  std::mutex mu;
  std::condition_variable cv;
  bool release = false, busy_entered = false;
  std::vector<Responder> parked;
  auto server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 1}, [&](Message&& m, Responder r) {
    std::unique_lock<std::mutex> lock(mu);
    if (m.header.op == Opcode::kCommand) {
      parked.push_back(std::move(r));
      cv.notify_all();
      return;
    }
    // Holds the only worker until released.
    busy_entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    r.ReplyOk();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = std::move(RpcClient::Create()).value();
  const int peer = *client->Connect((*server)->endpoint());
  RpcFuture held = client->Call(peer, Message(Opcode::kCommand), milliseconds(10000));
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !parked.empty(); }));
  }
  RpcFuture busy = client->Call(peer, Message(Opcode::kHeartbeat), milliseconds(10000));
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return busy_entered; }));
  }
  std::atomic<bool> task_ran{false};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto r = std::make_shared<Responder>(std::move(parked[0]));
    (*server)->Post([r, &task_ran] {
      task_ran = true;
      r->ReplyOk();
    });
  }
  std::thread stopper([&] { (*server)->Stop(); });
  std::this_thread::sleep_for(milliseconds(100));  // Stop is waiting for the worker
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  stopper.join();
  EXPECT_TRUE(busy.Wait().ok());
  // Answered either way, well before its deadline: by the task, or (Stop
  // came first, as it nearly always does) by the dropped task's Responder.
  const auto asked = std::chrono::steady_clock::now();
  const Status answer = held.Wait().status();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));
  EXPECT_EQ(answer.code(), task_ran.load() ? StatusCode::kOk : StatusCode::kInternal) << answer;
}

TEST_F(EchoFixture, DroppedResponderAnswersInternal) {
  auto r = client_->CallSync(peer_, Message(Opcode::kServerStats), milliseconds(5000));
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST_F(EchoFixture, MalformedRequestGetsErrorAndServerKeepsServing) {
  // A raw DEALER that sends garbage: a short header, then a header whose frame
  // count lies.
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::rcvtimeo, 5000);
  raw.connect(server_->endpoint());
  raw.send(zmq::buffer(std::string("short")), zmq::send_flags::none);

  Header h;
  h.op = Opcode::kLookup;
  h.request_id = 77;
  h.frame_count = 3;  // but only one frame follows
  uint8_t buf[kHeaderBytes];
  EncodeHeader(h, buf);
  raw.send(zmq::buffer(buf, kHeaderBytes), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(std::string("x")), zmq::send_flags::none);

  for (int i = 0; i < 2; ++i) {
    Message reply;
    Status st;
    for (int tries = 0; tries < 500; ++tries) {
      st = RecvMessage(raw, nullptr, &reply);
      if (st.code() != StatusCode::kNotFound) break;
      std::this_thread::sleep_for(milliseconds(5));
    }
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(reply.header.status, StatusCode::kInvalidArgument);
    if (reply.header.request_id == 77) {
      EXPECT_NE(StatusFromReply(reply).message().find("frames"), std::string::npos);
    }
  }
  // And the server still serves well-formed requests.
  Message m(Opcode::kHeartbeat);
  m.AddString("still here");
  auto r = client_->CallSync(peer_, std::move(m), milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->frames[0].to_string(), "still here");
}

// A request whose header carries an error status is refused before any
// handler sees it: decoders shared with replies would take it for one.
TEST_F(EchoFixture, ARequestCarryingAnErrorStatusIsRefusedUnserved) {
  Message m(Opcode::kHeartbeat);
  m.header.status = StatusCode::kDataLoss;
  m.AddString("my own words");
  auto r = client_->CallSync(peer_, std::move(m), milliseconds(5000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("carries the status DATA_LOSS"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().find("my own words"), std::string::npos) << r.status();
  // Nothing of it reached the handler: a parked request would show it.
  Message parked(Opcode::kCommand);
  parked.header.status = StatusCode::kInternal;
  EXPECT_EQ(client_->CallSync(peer_, std::move(parked), milliseconds(5000)).status().code(),
            StatusCode::kInvalidArgument);
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(parked_.empty());
}

TEST(RpcClientTest, UnreachablePeerTimesOut) {
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect("tcp://127.0.0.1:1");  // nothing listens there
  ASSERT_TRUE(peer.ok());
  auto r = (*client)->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(100));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(RpcClientTest, PendingCallsCancelledOnDestruction) {
  // Declared before the server so the parked responders outlive it.
  std::mutex mu;
  std::vector<Responder> parked;
  auto server = RpcServer::Start(RpcServerOptions{}, [&](Message&&, Responder r) {
    std::lock_guard<std::mutex> lock(mu);
    parked.push_back(std::move(r));  // never answered
  });
  ASSERT_TRUE(server.ok());
  RpcFuture f;
  {
    auto client = RpcClient::Create();
    ASSERT_TRUE(client.ok());
    auto peer = (*client)->Connect((*server)->endpoint());
    ASSERT_TRUE(peer.ok());
    f = (*client)->Call(*peer, Message(Opcode::kHeartbeat), milliseconds(60000));
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(f.Wait().status().code(), StatusCode::kCancelled);
}

TEST(RpcClientTest, CancelCallsEndsOnlyThatPeersCallsInFlight) {
  std::mutex mu;
  std::vector<Responder> parked;
  auto silent = RpcServer::Start(RpcServerOptions{}, [&](Message&&, Responder r) {
    std::lock_guard<std::mutex> lock(mu);
    parked.push_back(std::move(r));  // answered only at the end
  });
  auto echo = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(silent.ok() && echo.ok());
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto a = (*client)->Connect((*silent)->endpoint());
  auto b = (*client)->Connect((*echo)->endpoint());
  ASSERT_TRUE(a.ok() && b.ok());
  RpcFuture stuck = (*client)->Call(*a, Message(Opcode::kHeartbeat), milliseconds(60000));
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!parked.empty()) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  (*client)->CancelCalls(*a, Status::Cancelled("the plan changed"));
  auto r = stuck.Wait();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_NE(r.status().message().find("the plan changed"), std::string::npos);
  // The other peer, and later calls to the cancelled one, still work.
  EXPECT_TRUE((*client)->CallSync(*b, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  RpcFuture later = (*client)->Call(*a, Message(Opcode::kHeartbeat), milliseconds(5000));
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (parked.size() == 2) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    for (Responder& p : parked) p.ReplyOk();
    parked.clear();
  }
  EXPECT_TRUE(later.Wait().ok());

  // A call made right after CancelCalls, before the I/O thread ran, is not
  // cancelled with the ones before it.
  RpcFuture before = (*client)->Call(*a, Message(Opcode::kHeartbeat), milliseconds(60000));
  (*client)->CancelCalls(*a, Status::Cancelled("the master was replaced"));
  RpcFuture after = (*client)->Call(*b, Message(Opcode::kHeartbeat), milliseconds(5000));
  RpcFuture after_same_peer = (*client)->Call(*a, Message(Opcode::kHeartbeat), milliseconds(60000));
  EXPECT_EQ(before.Wait().status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(after.Wait().ok());
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (parked.size() >= 2) break;  // `before` and `after_same_peer`
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    for (Responder& p : parked) p.ReplyOk();
    parked.clear();
  }
  EXPECT_TRUE(after_same_peer.Wait().ok());
}

TEST(RpcClientTest, DisconnectedSinceTellsAPeerThatWentAwayAndCameBack) {
  std::mutex mu;
  std::vector<std::string> routing_ids;  // of every request served
  auto note = [&](Message&&, Responder r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      routing_ids.push_back(r.routing_id());
    }
    r.ReplyOk();
  };
  auto server = RpcServer::Start(RpcServerOptions{}, note);
  ASSERT_TRUE(server.ok());
  const std::string endpoint = (*server)->endpoint();
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE((*client)->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  EXPECT_FALSE((*client)->DisconnectedSince(*peer).has_value());
  EXPECT_FALSE((*client)->DisconnectedSince(*peer + 1).has_value());  // no such peer
  // The calls are counted once a round of the client's I/O thread: the
  // answered one leaves the count at the next round.
  const std::string idle = "connection to " + endpoint +
                           ": up; 1 connection(s), 0 drop(s), 0 call(s) sent again; 0 call(s) sent and waiting for a "
                           "reply, 0 not yet taken by the socket";
  for (int i = 0; i < 300 && (*client)->DescribeLink(*peer) != idle; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ((*client)->DescribeLink(*peer), idle);
  EXPECT_EQ((*client)->DescribeLink(*peer + 1), "no such connection");

  const auto before = std::chrono::steady_clock::now();
  server->reset();  // the peer goes away: its connection closes
  bool down = false;
  for (int i = 0; i < 300 && !down; ++i) {
    down = (*client)->DisconnectedSince(*peer).has_value();
    if (!down) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(down) << "no disconnect seen within 3 s";
  EXPECT_GE(*(*client)->DisconnectedSince(*peer), before);
  const std::string described = (*client)->DescribeLink(*peer);
  EXPECT_NE(described.find(": down for "), std::string::npos) << described;
  EXPECT_NE(described.find("1 connection(s), 1 drop(s)"), std::string::npos) << described;

  // Back on the same address: the client reconnects by itself.
  auto again = RpcServer::Start(RpcServerOptions{endpoint, 1}, note);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*client)->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(10000)).ok());
  for (int i = 0; i < 300 && (*client)->DisconnectedSince(*peer).has_value(); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE((*client)->DisconnectedSince(*peer).has_value());
  EXPECT_NE((*client)->DescribeLink(*peer).find(": up; 2 connection(s), 1 drop(s)"), std::string::npos)
      << (*client)->DescribeLink(*peer);
}

TEST(RpcClientTest, DescribeLinkCountsTheCallsWaitingForTheirReply) {
  std::mutex mu;
  std::vector<Responder> held;  // answered at the end
  auto hold = [&](Message&&, Responder r) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(r));
  };
  auto server = RpcServer::Start(RpcServerOptions{}, hold);
  ASSERT_TRUE(server.ok());
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect((*server)->endpoint());
  ASSERT_TRUE(peer.ok());
  RpcFuture a = (*client)->Call(*peer, Message(Opcode::kHeartbeat), milliseconds(10000));
  RpcFuture b = (*client)->Call(*peer, Message(Opcode::kHeartbeat), milliseconds(10000));
  std::string described;
  for (int i = 0; i < 500; ++i) {
    described = (*client)->DescribeLink(*peer);
    if (described.find("2 call(s) sent and waiting for a reply, 0 not yet taken") != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_NE(described.find("2 call(s) sent and waiting for a reply, 0 not yet taken"), std::string::npos)
      << described;
  // Sent is not yet received: the server may still be reading them (slowly,
  // under the sanitizers), and a call answered before it arrives would wait
  // out its deadline.
  size_t arrived = 0;
  for (int i = 0; i < 500 && arrived < 2; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      arrived = held.size();
    }
    if (arrived < 2) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(arrived, 2u);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (Responder& r : held) r.ReplyOk();
    held.clear();
  }
  EXPECT_TRUE(a.Wait().ok());
  EXPECT_TRUE(b.Wait().ok());
}

// Two jobs' key folders: the job's own and a stranger's.
class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera_rpc_keys_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(JobKeys::Write(dir_ + "/job").ok());
    ASSERT_TRUE(JobKeys::Write(dir_ + "/other").ok());
    auto master = JobKeys::Load(dir_ + "/job", Role::kMaster);
    ASSERT_TRUE(master.ok()) << master.status();
    // Answers with the caller's role and routing id.
    auto server = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 1, *master}, [this](Message&&, Responder r) {
      ++served_;
      Message reply;
      reply.AddString(RoleName(r.peer_role()));
      reply.AddBytes(r.routing_id().data(), r.routing_id().size());
      r.Reply(std::move(reply));
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<RpcClient> Client(const std::string& folder, Role role) {
    std::shared_ptr<const JobKeys> keys;
    if (!folder.empty()) keys = JobKeys::Load(dir_ + "/" + folder, role).value();
    return RpcClient::Create(keys).value();
  }
  std::string dir_;
  std::unique_ptr<RpcServer> server_;
  std::atomic<int> served_{0};
};

TEST_F(CurveTest, JobMembersAreServedAndKnownByRoleAndRoutingId) {
  for (Role role : {Role::kPs, Role::kTrainer, Role::kOperator}) {
    auto client = Client("job", role);
    auto peer = client->Connect(server_->endpoint(), Role::kMaster);
    ASSERT_TRUE(peer.ok()) << peer.status();
    auto reply = client->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(10000));
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->frames.size(), 2u);
    EXPECT_EQ(reply->frames[0].to_string(), RoleName(role));
    EXPECT_EQ(reply->frames[1].to_string(), client->routing_id());
  }
  EXPECT_EQ(served_.load(), 3);
}

TEST_F(CurveTest, AStrangersKeyIsRefusedAtOnceAndNeverServed) {
  // Another job's trainer, told this job's server key: still refused, as
  // only the job's own client keys get in.
  std::filesystem::copy_file(dir_ + "/job/master.public", dir_ + "/other/master.public",
                             std::filesystem::copy_options::overwrite_existing);
  auto client = Client("other", Role::kTrainer);
  auto peer = client->Connect(server_->endpoint(), Role::kMaster);
  ASSERT_TRUE(peer.ok());
  const auto start = std::chrono::steady_clock::now();
  auto reply = client->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(20000));
  EXPECT_EQ(reply.status().code(), StatusCode::kPermissionDenied) << reply.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(served_.load(), 0);
}

TEST_F(CurveTest, AClientExpectingAnotherServerKeyIsRefused) {
  // A client of this job that expects another server key (another job's
  // master): its handshake cannot complete, so nothing reaches the handler.
  std::filesystem::copy_file(dir_ + "/other/master.public", dir_ + "/job/master.public",
                             std::filesystem::copy_options::overwrite_existing);
  auto misled = Client("job", Role::kTrainer);
  auto peer = misled->Connect(server_->endpoint(), Role::kMaster);
  ASSERT_TRUE(peer.ok());
  // The server cannot read its hello and closes each connection: after a few
  // the client calls it a refusal rather than waiting out the deadline.
  const auto start = std::chrono::steady_clock::now();
  auto reply = misled->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(20000));
  EXPECT_EQ(reply.status().code(), StatusCode::kPermissionDenied) << reply.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(served_.load(), 0);
}

TEST_F(CurveTest, APlainClientGetsNowhere) {
  auto client = Client("", Role::kNone);
  auto peer = client->Connect(server_->endpoint());
  ASSERT_TRUE(peer.ok());
  auto reply = client->CallSync(*peer, Message(Opcode::kHeartbeat), milliseconds(3000));
  EXPECT_FALSE(reply.ok());
  EXPECT_EQ(served_.load(), 0);
}

// A peer that never takes a connection (its handshakes fail) must not stall
// the client's other peers: a DEALER without a connection blocks a send, and
// the one thread serving every peer must never make one (found as a hang of
// the forged-messages test).
TEST_F(CurveTest, APeerThatNeverConnectsStallsNoOtherPeer) {
  auto echo = RpcServer::Start(RpcServerOptions{"tcp://127.0.0.1:0", 1}, [](Message&& m, Responder r) {
    Message reply;
    for (auto& f : m.frames) reply.AddBytes(f.data(), f.size());
    r.Reply(std::move(reply));
  });
  ASSERT_TRUE(echo.ok()) << echo.status();
  auto client = Client("", Role::kNone);
  auto stranger = client->Connect(server_->endpoint());
  auto friendly = client->Connect((*echo)->endpoint());
  ASSERT_TRUE(stranger.ok() && friendly.ok());
  std::vector<RpcFuture> refused;
  bool stalled = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end && !stalled) {
    for (int i = 0; i < 20; ++i) refused.push_back(client->Call(*stranger, Message(Opcode::kHeartbeat), milliseconds(300)));
    Message ping(Opcode::kHeartbeat);
    ping.AddString("ping");
    RpcFuture pong = client->Call(*friendly, std::move(ping), milliseconds(5000));
    if (!pong.WaitFor(milliseconds(10000))) {
      stalled = true;
      break;
    }
    auto reply = pong.Wait();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->frames.at(0).to_string(), "ping");
    std::this_thread::sleep_for(milliseconds(20));
  }
  for (RpcFuture& f : refused) {
    if (stalled) break;
    if (!f.WaitFor(milliseconds(10000))) {
      stalled = true;
      break;
    }
    EXPECT_FALSE(f.Wait().ok());
  }
  if (stalled) {
    ADD_FAILURE() << "the client's I/O thread stalled: calls got no answer, not even their deadline's";
    (void)client.release();  // its thread never ends: leave it, so the test does
  }
  EXPECT_EQ(served_.load(), 0);
}

TEST_F(CurveTest, ConnectingWithKeysNeedsTheServersRole) {
  auto client = Client("job", Role::kTrainer);
  EXPECT_EQ(client->Connect(server_->endpoint()).status().code(), StatusCode::kInvalidArgument);
}

TEST(RpcClientTest, DisconnectEndsThatPeersCallsAndItsConnection) {
  std::mutex mu;
  std::vector<Responder> parked;
  auto park = [&](Message&&, Responder r) {
    std::lock_guard<std::mutex> lock(mu);
    parked.push_back(std::move(r));
  };
  auto a = RpcServer::Start(RpcServerOptions{}, park);
  auto b = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(a.ok() && b.ok());
  auto client = std::move(RpcClient::Create()).value();
  const int pa = *client->Connect((*a)->endpoint());
  const int pb = *client->Connect((*b)->endpoint());
  RpcFuture waiting = client->Call(pa, Message(Opcode::kHeartbeat), milliseconds(20000));
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!parked.empty()) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  client->Disconnect(pa);
  EXPECT_EQ(waiting.Wait().status().code(), StatusCode::kCancelled);
  EXPECT_EQ(client->CallSync(pa, Message(Opcode::kHeartbeat), milliseconds(2000)).status().code(),
            StatusCode::kCancelled);
  // The other peer is untouched, and a new connection gets a new index.
  EXPECT_TRUE(client->CallSync(pb, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  const int again = *client->Connect((*b)->endpoint());
  EXPECT_NE(again, pa);
  EXPECT_TRUE(client->CallSync(again, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  client.reset();
  std::lock_guard<std::mutex> lock(mu);
  parked.clear();
}

// A server that goes away just as the client closes its connection to it:
// libzmq raises the disconnection from its I/O thread, and had the client
// already closed that socket's event reader, the I/O thread would wait on
// it for good and no other connection would move again. Each round races
// the two; the other server must answer every time.
TEST(RpcClientTest, AServerLeavingAsItsConnectionClosesStallsNoOtherPeer) {
  auto b = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(b.ok());
  auto client = std::move(RpcClient::Create()).value();
  const int pb = *client->Connect((*b)->endpoint());
  for (int round = 0; round < 150; ++round) {
    auto a = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
    ASSERT_TRUE(a.ok());
    const int pa = *client->Connect((*a)->endpoint());
    ASSERT_TRUE(client->CallSync(pa, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
    std::thread stop([&a, round] {
      std::this_thread::sleep_for(std::chrono::microseconds(50 * (round % 8)));
      a->reset();
    });
    client->Disconnect(pa);
    stop.join();
    ASSERT_TRUE(client->CallSync(pb, Message(Opcode::kHeartbeat), milliseconds(5000)).ok()) << "round " << round;
  }
}

TEST(PeerPoolTest, OneConnectionPerKeyUntilForgotten) {
  auto a = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  auto b = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  // A server of its own: one client's connections share one routing id, so
  // a second one to a server takes the first one's place there.
  auto c = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto client = std::move(RpcClient::Create()).value();
  PeerPool<int> pool(client.get(), Role::kNone);
  EXPECT_FALSE(pool.Find(1).has_value());
  const int p1 = *pool.Get(1, (*a)->endpoint());
  const int p2 = *pool.Get(2, (*b)->endpoint());
  EXPECT_NE(p1, p2);
  EXPECT_EQ(*pool.Get(1, (*a)->endpoint()), p1);  // kept, not connected again
  EXPECT_EQ(*pool.Find(1), p1);
  EXPECT_EQ(pool.keys(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(client->CallSync(p1, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());

  // Forgetting closes the connection: its calls end CANCELLED, the others' go on.
  pool.Forget(1);
  pool.Forget(7);  // never connected: nothing
  EXPECT_FALSE(pool.Find(1).has_value());
  EXPECT_EQ(client->CallSync(p1, Message(Opcode::kHeartbeat), milliseconds(2000)).status().code(),
            StatusCode::kCancelled);
  EXPECT_TRUE(client->CallSync(p2, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  const int again = *pool.Get(1, (*a)->endpoint());
  EXPECT_NE(again, p1);
  EXPECT_TRUE(client->CallSync(again, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());

  const int p3 = *pool.Get(3, (*c)->endpoint());
  EXPECT_TRUE(client->CallSync(p3, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  pool.ForgetAllBut({2, 5});
  EXPECT_EQ(pool.keys(), (std::vector<int>{2}));
  EXPECT_EQ(client->CallSync(again, Message(Opcode::kHeartbeat), milliseconds(2000)).status().code(),
            StatusCode::kCancelled);
  EXPECT_EQ(client->CallSync(p3, Message(Opcode::kHeartbeat), milliseconds(2000)).status().code(),
            StatusCode::kCancelled);
  EXPECT_TRUE(client->CallSync(p2, Message(Opcode::kHeartbeat), milliseconds(5000)).ok());
  pool.ForgetAll();
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(client->CallSync(p2, Message(Opcode::kHeartbeat), milliseconds(2000)).status().code(),
            StatusCode::kCancelled);
}

TEST(PeerPoolTest, AnEndpointThatCannotBeConnectedToIsAnErrorAndNotKept) {
  auto client = std::move(RpcClient::Create()).value();
  PeerPool<std::string> pool(client.get(), Role::kNone);
  EXPECT_FALSE(pool.Get("not-an-endpoint", "not-an-endpoint").ok());
  EXPECT_EQ(pool.size(), 0u);
}

TEST(RpcServerTest, AFrameOverTheLimitDropsItsConnectionBeforeItReachesAHandler) {
  std::atomic<int> served{0};
  RpcServerOptions options;
  options.max_frame_bytes = 1024;
  auto server = RpcServer::Start(options, [&](Message&&, Responder r) {
    ++served;
    r.ReplyOk();
  });
  ASSERT_TRUE(server.ok());
  auto client = std::move(RpcClient::Create()).value();
  const int peer = *client->Connect((*server)->endpoint());
  Message big(Opcode::kHeartbeat);
  big.AddString(std::string(4096, 'x'));
  EXPECT_FALSE(client->CallSync(peer, std::move(big), milliseconds(500)).ok());
  EXPECT_EQ(served.load(), 0);
  // The client reconnects by itself; a request within the limit is served.
  Message small(Opcode::kHeartbeat);
  small.AddString(std::string(512, 'x'));
  EXPECT_TRUE(client->CallSync(peer, std::move(small), milliseconds(10000)).ok());
  EXPECT_EQ(served.load(), 1);
}

TEST(RpcServerTest, BindFailureIsAnError) {
  auto a = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(a.ok());
  auto b = RpcServer::Start(RpcServerOptions{(*a)->endpoint(), 0}, [](Message&&, Responder r) { r.ReplyOk(); });
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera
