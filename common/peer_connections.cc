#include "common/peer_connections.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>

namespace tessera {

PeerConnections::Admit PeerConnections::Accepted(int fd, const std::string& address) {
  Closed(fd);
  if (max_total_ > 0 && by_fd_.size() >= max_total_) return Admit::kOverTotal;
  by_fd_.emplace(fd, address);
  ++by_address_[address];
  return Admit::kYes;
}

void PeerConnections::Closed(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  auto a = by_address_.find(it->second);
  if (a != by_address_.end() && --a->second == 0) by_address_.erase(a);
  by_fd_.erase(it);
}

bool PeerConnections::OverPerPeer(const std::string& address) const {
  return max_per_peer_ > 0 && open_from(address) > max_per_peer_;
}

size_t PeerConnections::open_from(const std::string& address) const {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second;
}

std::string PeerAddressOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  // As libzmq writes the address of its ZAP requests, so the two agree.
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}

int LocalPortOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

size_t DefaultMaxConnections() {
  constexpr size_t kMost = 4096;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kMost;
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur) / 2, 1, kMost);
}

}  // namespace tessera
