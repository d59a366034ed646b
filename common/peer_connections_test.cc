#include "common/peer_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(PeerConnectionsTest, CountsByAddressAndForgetsClosedOnes) {
  PeerConnections c(2, 0);
  EXPECT_EQ(c.Accepted(7, "10.0.0.1"), PeerConnections::Admit::kYes);
  EXPECT_EQ(c.Accepted(8, "10.0.0.1"), PeerConnections::Admit::kYes);
  EXPECT_FALSE(c.OverPerPeer("10.0.0.1"));
  EXPECT_EQ(c.Accepted(9, "10.0.0.1"), PeerConnections::Admit::kYes);
  // The third one's handshake is refused; other hosts are not affected.
  EXPECT_TRUE(c.OverPerPeer("10.0.0.1"));
  EXPECT_FALSE(c.OverPerPeer("10.0.0.2"));
  EXPECT_EQ(c.open_from("10.0.0.1"), 3u);
  c.Closed(9);
  c.Closed(9);   // twice: once
  c.Closed(42);  // never seen
  EXPECT_FALSE(c.OverPerPeer("10.0.0.1"));
  EXPECT_EQ(c.open(), 2u);
  c.Closed(7);
  c.Closed(8);
  EXPECT_EQ(c.open(), 0u);
  EXPECT_EQ(c.open_from("10.0.0.1"), 0u);
}

TEST(PeerConnectionsTest, ADescriptorSeenAgainIsCountedOnceUnderItsNewAddress) {
  PeerConnections c(1, 0);
  c.Accepted(5, "10.0.0.1");
  // Its close was missed; the descriptor now holds another host's connection.
  c.Accepted(5, "10.0.0.2");
  EXPECT_EQ(c.open(), 1u);
  EXPECT_EQ(c.open_from("10.0.0.1"), 0u);
  EXPECT_EQ(c.open_from("10.0.0.2"), 1u);
}

TEST(PeerConnectionsTest, OverTheTotalIsNotCountedAndLeavesRoomOnceOneCloses) {
  PeerConnections c(0, 2);
  EXPECT_EQ(c.Accepted(1, "a"), PeerConnections::Admit::kYes);
  EXPECT_EQ(c.Accepted(2, "b"), PeerConnections::Admit::kYes);
  EXPECT_EQ(c.Accepted(3, "c"), PeerConnections::Admit::kOverTotal);
  EXPECT_EQ(c.open(), 2u);
  EXPECT_EQ(c.open_from("c"), 0u);
  c.Closed(3);  // the refused one's close changes nothing
  EXPECT_EQ(c.open(), 2u);
  c.Closed(1);
  EXPECT_EQ(c.Accepted(3, "c"), PeerConnections::Admit::kYes);
  // No per-peer limit: never over it.
  for (int fd = 10; fd < 20; ++fd) c.Closed(fd);
  EXPECT_FALSE(c.OverPerPeer("c"));
}

TEST(PeerConnectionsTest, AddressesAndPortsOfRealSockets) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  EXPECT_EQ(PeerAddressOf(accepted), "127.0.0.1");
  EXPECT_EQ(LocalPortOf(accepted), port);
  EXPECT_NE(LocalPortOf(client), port);
  // A listening socket has no peer; a closed descriptor is nothing.
  EXPECT_EQ(PeerAddressOf(listener), "");
  close(accepted);
  close(client);
  close(listener);
  EXPECT_EQ(PeerAddressOf(accepted), "");
  EXPECT_EQ(LocalPortOf(accepted), -1);
  EXPECT_GE(DefaultMaxConnections(), 1u);
  EXPECT_LE(DefaultMaxConnections(), 4096u);
}

}  // namespace
}  // namespace tessera
