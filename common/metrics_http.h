// MetricsHttpServer: serves a MetricsRegistry as Prometheus' text format at
// http://ADDRESS:PORT/metrics, on its own thread (cpp-httplib, Debian's
// libcpp-httplib-dev). Read-only: it answers GET /metrics and nothing else,
// so it needs none of the job's keys; bind it where the scraper can reach it
// and no one else (docs/operations.md).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "common/prometheus_text.h"
#include "common/status.h"

namespace httplib {
class Server;
}

namespace tessera {

// The endpoint answers this many connections at once and queues this many
// more; further ones wait unaccepted (metrics_http.cc says why).
inline constexpr int kMetricsThreads = 2;
inline constexpr size_t kMetricsWaitingConnections = 8;

class MetricsHttpServer {
 public:
  // Binds `address`:`port` (port 0 picks a free one: read it from port())
  // and starts serving. `registry` must outlive the server.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address, int port,
                                                            const MetricsRegistry* registry);
  ~MetricsHttpServer();

  int port() const { return port_; }
  // "http://ADDRESS:PORT/metrics", for the log.
  std::string url() const;

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  int port_ = 0;
  std::thread thread_;
};

// Where a role's endpoint listens: `given` (--metrics_address) when set,
// else the host of the role's own `bind_endpoint` ("tcp://HOST:PORT"; "*" is
// every interface), else 127.0.0.1. A role reachable by its peers is then
// reachable by the scraper, and one bound to loopback stays private.
std::string MetricsAddress(const std::string& given, const std::string& bind_endpoint);

// For a role's main(): starts serving `registry` when `port` >= 0 (logging
// where), nothing when it is negative (the flag's default: off).
StatusOr<std::unique_ptr<MetricsHttpServer>> MaybeServeMetrics(const std::string& address, int port,
                                                               const MetricsRegistry* registry);

}  // namespace tessera
