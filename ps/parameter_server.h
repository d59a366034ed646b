// ParameterServer: one parameter-server process's life — listen, register
// with the master, serve lookups and pushes, heartbeat, and stop when the
// master says so (or exit with an error when the master is gone).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/peer_pool.h"
#include "common/prometheus_text.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/status.h"
#include "ps/ps_service.h"
#include "ps/store_factory.h"

namespace tessera {

struct ParameterServerOptions {
  // The job's CURVE keys (common/job_keys.h); null: plain TCP (--insecure).
  std::shared_ptr<const JobKeys> keys;
  // The master's address, "tcp://host:port".
  std::string master;
  // Where to listen; port 0 picks a free one.
  std::string bind_address = "tcp://127.0.0.1:0";
  // How many connections its port takes (--max_connections_per_peer,
  // --max_connections).
  ConnectionLimits connections;
  // The host name trainers use to reach this server (replaces the bind
  // address's host in what is registered; "" keeps it).
  std::string advertise_host;
  // Threads serving lookups and pushes. More than the trainers' count buys
  // nothing in sync mode; each thread keeps its own dedup scratch.
  int threads = 2;
  // Host group reported to the planner (table_row_wise keeps a table within
  // one host's servers); "" reports the machine's host name.
  std::string host_group;
  // Bytes of embedding rows this server may hold, for the planner; 0 = no limit.
  int64_t memory_bytes = 0;
  // Where rows live: host memory only, or host memory over RocksDB.
  ShardStorageOptions storage;
  // How long to keep trying to reach the master at start.
  int64_t register_timeout_ms = 120000;
  // Fault injection for tests (see PsServiceOptions::before_control and
  // test_data_loss_at_lookup).
  std::function<void(Opcode)> before_control;
  int64_t test_data_loss_at_lookup = 0;
};

class ParameterServer {
 public:
  static StatusOr<std::unique_ptr<ParameterServer>> Start(const ParameterServerOptions& options);
  ~ParameterServer();

  // Registers, then heartbeats until the master shuts the job down (OK), the
  // job is aborted (ABORTED), or the master is unreachable (UNAVAILABLE).
  Status Run();

  // Asks the master to drain this server's rows to the others and shut it
  // down (SIGTERM). Thread-safe. On error nothing changes; Stop() ends it.
  Status Leave();
  // This server's figures for its metrics endpoint: its requests (by
  // opcode), shards and tiers. Thread-safe.
  void WriteMetrics(PrometheusText* out) const;
  // Makes Run() return `why` at its next heartbeat. Thread-safe.
  void Stop(const Status& why);

  const std::string& endpoint() const { return endpoint_; }
  int rank() const { return rank_; }

 private:
  ParameterServer() = default;
  Status Register();

  ParameterServerOptions options_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  int master_peer_ = -1;
  // Another server's reply to `request` (a migration's FETCH_ROWS):
  // PsServiceOptions::call_server.
  StatusOr<Message> CallServer(const std::string& endpoint, Message&& request, std::chrono::milliseconds timeout,
                               const std::atomic<bool>* cancel);
  // Closes the connections CallServer opened: PsServiceOptions::end_server_calls.
  void EndServerCalls();
  std::unique_ptr<PeerPool<std::string>> server_peers_;  // endpoint -> peer of client_
  std::string endpoint_;
  int rank_ = -1;
  int64_t heartbeat_ms_ = 500;
  int64_t peer_timeout_ms_ = 10000;
  int64_t master_reconnect_ms_ = 60000;
  // The master registered with: a master that took over (--recover) has
  // another id and has this server register again.
  int64_t master_id_ = 0;
  std::mutex stop_mu_;
  Status stop_reason_;  // GUARDED_BY(stop_mu_): OK while running
};

}  // namespace tessera
