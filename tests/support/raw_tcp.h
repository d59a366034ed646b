// Raw TCP connections for tests of what a server does with connections that
// never speak ZeroMQ: opened from a chosen loopback address, and watched for
// the server closing them.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

namespace tessera::testing {

enum class Connect {
  kWait,      // until the server's kernel has taken the connection
  kDontWait,  // return at once: for servers that leave connections in their backlog
};

// A TCP connection from `source` (an IPv4 address of this machine, e.g. one
// of 127.0.0.0/8) to `host`:`port` that sends nothing; -1 if it could not be
// made (with kDontWait, only if it could not be started).
inline int SilentConnection(const std::string& source, const std::string& host, int port,
                            Connect mode = Connect::kWait) {
  sockaddr_in to{}, from{};
  to.sin_family = from.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &to.sin_addr) != 1) return -1;
  if (inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | (mode == Connect::kDontWait ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0 ||
      (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0 &&
       !(mode == Connect::kDontWait && errno == EINPROGRESS))) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the other end closed `fd` within `wait` (what it sent first, a
// ZeroMQ greeting, is read past).
inline bool ClosedByPeer(int fd, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  char buf[256];
  do {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

}  // namespace tessera::testing
