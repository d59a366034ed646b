#include "common/net_address.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tessera {
namespace {

TEST(NetAddressTest, TheRouteToLoopbackGoesFromLoopback) {
  auto from = LocalAddressToward("tcp://127.0.0.1:5555");
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, "127.0.0.1");
  auto by_name = LocalAddressToward("tcp://localhost:5555");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(*by_name, "127.0.0.1");
  const auto mine = LocalAddresses();
  EXPECT_NE(std::find(mine.begin(), mine.end(), "127.0.0.1"), mine.end());
}

TEST(NetAddressTest, AdvertisedHostIsGivenTheBindHostOrTheRouteToTheMaster) {
  const std::string master = "tcp://127.0.0.1:5555";
  EXPECT_EQ(AdvertisedHost("", "tcp://127.0.0.1:0", master).value(), "127.0.0.1");
  // A wildcard bind is no one's address: the route to the master's is.
  EXPECT_EQ(AdvertisedHost("", "tcp://0.0.0.0:0", master).value(), "127.0.0.1");
  EXPECT_EQ(AdvertisedHost("", "tcp://*:0", master).value(), "127.0.0.1");
  EXPECT_EQ(AdvertisedHost("", "", master).value(), "127.0.0.1");
  EXPECT_EQ(AdvertisedHost("localhost", "tcp://0.0.0.0:0", master).value(), "localhost");
}

TEST(NetAddressTest, AnAddressThatIsNotThisMachinesIsAnErrorNamingBoth) {
  // 192.0.2.0/24 is TEST-NET-1: no machine has it.
  auto wrong = AdvertisedHost("192.0.2.77", "tcp://0.0.0.0:0", "tcp://127.0.0.1:5555");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("192.0.2.77"), std::string::npos) << wrong.status();
  EXPECT_NE(wrong.status().message().find("goes through 127.0.0.1"), std::string::npos) << wrong.status();
  auto unresolvable = AdvertisedHost("no-such-host.invalid", "", "tcp://127.0.0.1:5555");
  EXPECT_EQ(unresolvable.status().code(), StatusCode::kInvalidArgument) << unresolvable.status();
  EXPECT_FALSE(LocalAddressToward("127.0.0.1:5555").ok());  // not tcp://HOST:PORT
  EXPECT_FALSE(LocalAddressToward("tcp://no-such-host.invalid:1").ok());
  EXPECT_FALSE(AdvertisedHost("", "tcp://0.0.0.0", "tcp://127.0.0.1:5555").ok());
}

TEST(NetAddressTest, APeersAddressIsTcpHostAndAPortInRange) {
  for (const char* good : {"tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://node-7.cluster:65535"}) {
    EXPECT_TRUE(CheckPeerEndpoint(good).ok()) << good;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"notanaddress", "does not start with tcp://"},
      {"127.0.0.1:5555", "does not start with tcp://"},
      {"ipc:///tmp/x", "does not start with tcp://"},
      {"tcp://", "no host"},
      {"tcp://:5555", "no host"},
      {"tcp://host", "no host"},
      {"tcp://host:", "not a number"},
      {"tcp://host:55x", "not a number"},
      {"tcp://host:-1", "not a number"},
      {"tcp://host:0", "not in 1..65535"},
      {"tcp://host:99999", "not in 1..65535"},
      {"tcp://host:1234567", "not a number"},
  };
  for (const auto& [endpoint, why] : bad) {
    Status st = CheckPeerEndpoint(endpoint);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << endpoint;
    EXPECT_NE(st.message().find(why), std::string::npos) << endpoint << ": " << st;
  }
}

TEST(NetAddressTest, AnAddressToListenOnMayLetTheSystemPickThePort) {
  for (const char* good : {"tcp://127.0.0.1:0", "tcp://0.0.0.0:5555", "tcp://*:0", "tcp://*:*", "tcp://h:65535"}) {
    EXPECT_TRUE(CheckBindEndpoint(good).ok()) << good;
  }
  // libzmq would listen on 99999 - 65536 = 34463.
  EXPECT_NE(CheckBindEndpoint("tcp://127.0.0.1:99999").message().find("not in 0..65535"), std::string::npos);
  EXPECT_FALSE(CheckBindEndpoint("garbage").ok());
  EXPECT_FALSE(CheckBindEndpoint("tcp://:0").ok());
  EXPECT_FALSE(CheckPeerEndpoint("tcp://*:*").ok());  // no one to reach
}

}  // namespace
}  // namespace tessera
