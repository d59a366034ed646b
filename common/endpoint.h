// ZeroMQ endpoint strings ("tcp://host:port").
#pragma once

#include <string>

namespace tessera {

// "tcp://0.0.0.0:4242" with host "node7" -> "tcp://node7:4242"; an empty host
// leaves the endpoint as it is.
inline std::string ReplaceEndpointHost(const std::string& endpoint, const std::string& host) {
  const size_t scheme = endpoint.find("://");
  const size_t colon = endpoint.rfind(':');
  if (host.empty() || scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) return endpoint;
  return endpoint.substr(0, scheme + 3) + host + endpoint.substr(colon);
}

}  // namespace tessera
