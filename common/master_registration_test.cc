#include "common/master_registration.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/messages.h"
#include "common/rpc_server.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// A master that comes up later than the member: registration waits for it.
TEST(MasterRegistrationTest, RetriesUntilTheMasterAnswers) {
  auto probe = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) { r.ReplyOk(); });
  ASSERT_TRUE(probe.ok());
  const std::string endpoint = (*probe)->endpoint();
  (*probe)->Stop();
  probe->reset();  // the port is free again; the master binds it later

  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  std::unique_ptr<RpcServer> master;
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(2500));
    auto m = RpcServer::Start(RpcServerOptions{endpoint, 0}, [](Message&& msg, Responder r) {
      auto body = DecodeJson(msg);
      r.Reply(EncodeJsonReply(r.request_header(), json{{"rank", 3}, {"echo", body.ok() ? (*body)["role"] : "?"}}));
    });
    if (m.ok()) master = std::move(*m);
  });
  auto reply = RegisterWithMaster(client->get(), *peer, endpoint, json{{"role", "ps"}}, milliseconds(20000));
  later.join();
  ASSERT_TRUE(master != nullptr) << "could not bind " << endpoint << " again";
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ((*reply)["rank"], 3);
  EXPECT_EQ((*reply)["echo"], "ps");
}

TEST(MasterRegistrationTest, ARefusalEndsItAtOnce) {
  auto master = RpcServer::Start(RpcServerOptions{}, [](Message&&, Responder r) {
    r.ReplyError(Status::AlreadyExists("trainer rank 1 is already registered"));
  });
  ASSERT_TRUE(master.ok());
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect((*master)->endpoint());
  ASSERT_TRUE(peer.ok());
  const auto start = std::chrono::steady_clock::now();
  auto reply = RegisterWithMaster(client->get(), *peer, (*master)->endpoint(), json{{"role", "trainer"}},
                                  milliseconds(20000));
  EXPECT_EQ(reply.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(reply.status().message().find("registering with the master"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
}

TEST(MasterRegistrationTest, NoMasterGivesUpNamingIt) {
  auto client = RpcClient::Create();
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->Connect("tcp://127.0.0.1:1");
  ASSERT_TRUE(peer.ok());
  auto reply = RegisterWithMaster(client->get(), *peer, "tcp://127.0.0.1:1", json{{"role", "ps"}}, milliseconds(300));
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("tcp://127.0.0.1:1"), std::string::npos);
}

}  // namespace
}  // namespace tessera
