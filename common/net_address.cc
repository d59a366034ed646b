#include "common/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tessera {
namespace {

// The host and port of tcp://HOST:PORT.
Status SplitEndpoint(const std::string& endpoint, std::string* host, std::string* port) {
  const size_t scheme = endpoint.find("://");
  const size_t colon = endpoint.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon <= scheme + 3) {
    return Status::InvalidArgument("'" + endpoint + "' is not an address of the form tcp://HOST:PORT");
  }
  *host = endpoint.substr(scheme + 3, colon - scheme - 3);
  *port = endpoint.substr(colon + 1);
  return Status::OK();
}

// tcp://HOST:PORT with a host and a port in [lowest, 65535] (or "*", where
// any_port: a port the system picks).
Status CheckTcpEndpoint(const std::string& endpoint, int lowest, bool any_port) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("'" + endpoint + "' is not an address of the form tcp://HOST:PORT: " + why);
  };
  if (endpoint.rfind("tcp://", 0) != 0) return bad("it does not start with tcp://");
  std::string host, port;
  if (!SplitEndpoint(endpoint, &host, &port).ok() || host.empty()) return bad("no host");
  if (any_port && port == "*") return Status::OK();
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return bad("the port is not a number");
  }
  const int number = std::atoi(port.c_str());
  if (number < lowest || number > 65535) {
    return bad("the port is not in " + std::to_string(lowest) + "..65535");
  }
  return Status::OK();
}

// The IPv4 addresses `host` resolves to.
StatusOr<std::vector<std::string>> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    return Status::Unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  std::vector<std::string> out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) out.emplace_back(text);
  }
  freeaddrinfo(found);
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

Status CheckPeerEndpoint(const std::string& endpoint) { return CheckTcpEndpoint(endpoint, 1, false); }

Status CheckBindEndpoint(const std::string& endpoint) { return CheckTcpEndpoint(endpoint, 0, true); }

StatusOr<std::string> LocalAddressToward(const std::string& endpoint) {
  std::string host, port;
  TESSERA_RETURN_IF_ERROR(SplitEndpoint(endpoint, &host, &port));
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> addresses, Resolve(host));
  if (addresses.empty()) return Status::Unavailable("'" + host + "' has no IPv4 address");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(port.c_str())));
  inet_pton(AF_INET, addresses.front().c_str(), &to.sin_addr);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));
  // Connecting a UDP socket only picks the route (and so the source address).
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Status::Unavailable("no route to " + host + " (" + addresses.front() + "): " + why);
  }
  sockaddr_in self{};
  socklen_t len = sizeof(self);
  const int rc = getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
  close(fd);
  if (rc != 0) return Status::Unavailable(std::string("getsockname: ") + std::strerror(errno));
  char text[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &self.sin_addr, text, sizeof(text));
  return std::string(text);
}

std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_UP) == 0) continue;
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

StatusOr<std::string> AdvertisedHost(const std::string& given, const std::string& bind_endpoint,
                                     const std::string& master_endpoint) {
  if (!given.empty()) {
    const std::vector<std::string> mine = LocalAddresses();
    auto resolved = Resolve(given);
    if (resolved.ok()) {
      for (const std::string& a : *resolved) {
        if (std::find(mine.begin(), mine.end(), a) != mine.end()) return given;
      }
    }
    auto toward = LocalAddressToward(master_endpoint);
    return Status::InvalidArgument(
        "the address to advertise, '" + given + "'" +
        (resolved.ok() ? " (" + Join(*resolved) + ")" : " (" + resolved.status().message() + ")") +
        ", is not one of this machine's (" + Join(mine) + "); the route to the master " + master_endpoint +
        " goes through " + (toward.ok() ? *toward : toward.status().message()));
  }
  std::string host, port;
  if (!bind_endpoint.empty()) {
    TESSERA_RETURN_IF_ERROR(SplitEndpoint(bind_endpoint, &host, &port));
    if (host != "0.0.0.0" && host != "*") return host;
  }
  auto toward = LocalAddressToward(master_endpoint);
  if (!toward.ok()) {
    return toward.status().WithContext("finding the address peers reach this process by (give it with "
                                       "--advertise_host)");
  }
  return toward;
}

}  // namespace tessera
