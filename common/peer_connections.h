// PeerConnections: the TCP connections a server holds open, counted by the
// address they come from, so that no one host (and no flood) can take all
// of a process's file descriptors.
//
// Two limits, each enforced where it can be said clearly:
// - per peer address (`max_per_peer`): a connection that would exceed it is
//   refused in its handshake (the server's ZAP handler answers 500, which the
//   client reports as RESOURCE_EXHAUSTED naming the limit);
// - in all (`max_total`): a connection that would exceed it is closed as
//   soon as it is accepted, before any byte of it is read. Connections that
//   never handshake never reach ZAP, so only this limit stops a flood of
//   them from taking the descriptors RocksDB and checkpoints need.
//
// The server feeds it its listening socket's monitor events (accepted and
// disconnected, each with the connection's descriptor) on its I/O thread;
// not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

namespace tessera {

class PeerConnections {
 public:
  // 0 for either: no limit of that kind.
  PeerConnections(size_t max_per_peer, size_t max_total) : max_per_peer_(max_per_peer), max_total_(max_total) {}

  enum class Admit {
    kYes,
    kOverTotal,  // close it now: the server holds max_total connections already
  };
  // A connection on descriptor `fd` from `address` was accepted. A
  // descriptor seen again before it was closed (a missed event) is counted
  // once, under its newest address.
  Admit Accepted(int fd, const std::string& address);
  // The connection on `fd` closed (or was closed); unknown descriptors are
  // ignored.
  void Closed(int fd);

  // Whether a handshake from `address` is to be refused: its connections,
  // the handshaking one included, are more than max_per_peer.
  bool OverPerPeer(const std::string& address) const;

  size_t open() const { return by_fd_.size(); }
  size_t open_from(const std::string& address) const;

 private:
  size_t max_per_peer_;
  size_t max_total_;
  std::unordered_map<int, std::string> by_fd_;
  std::unordered_map<std::string, size_t> by_address_;
};

// The numeric address of the remote end of connected socket `fd` ("127.0.0.1",
// "::1"), written as libzmq writes it in its ZAP requests; "" when `fd` is not
// a connected socket.
std::string PeerAddressOf(int fd);

// The local port of socket `fd`; -1 when it has none.
int LocalPortOf(int fd);

// The limit on connections a server takes in all when none is given: half of
// the process's descriptors (RLIMIT_NOFILE, soft), at most 4,096, so that a
// flood leaves the other half to the server's files.
size_t DefaultMaxConnections();

}  // namespace tessera
