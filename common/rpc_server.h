// RpcServer: a ZeroMQ ROUTER socket owned by one I/O thread, with handlers
// run on a small worker pool (or inline on the I/O thread for cheap ones).
//
// Many requests may be in flight from many clients. A handler answers through
// its Responder, at once or later from any thread (a parameter server defers
// a sync-mode lookup until the previous step's gradients are applied). A
// request that cannot be framed (bad header, wrong frame count) is answered
// with an error reply by the server itself and never reaches the handler.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/job_keys.h"
#include "common/peer_connections.h"
#include "common/prometheus_text.h"
#include "common/recent_replies.h"
#include "common/status.h"
#include "common/wire_format.h"

namespace tessera {

// How many TCP connections a server holds (common/peer_connections.h).
struct ConnectionLimits {
  // From one address (a host) at most; one more is refused in its
  // handshake with a reason its client reports (RESOURCE_EXHAUSTED). 0: no
  // limit.
  int64_t per_peer = 256;
  // In all at most; one more is closed as it is accepted, so a flood of
  // connections that never handshake cannot take the descriptors the
  // server's files need. -1: DefaultMaxConnections() (half the process's
  // descriptors, at most 4,096); 0: no limit.
  int64_t total = -1;
  // A connection that has not finished its handshake this long after it was
  // accepted is closed (libzmq's ZMQ_HANDSHAKE_IVL; its default is 30 s), so
  // connections that never handshake hold their room that long at most. A
  // member's client that is cut off dials again. 0: no limit.
  int64_t handshake_timeout_ms = 10000;
};

struct RpcServerOptions {
  // Where to listen; port 0 picks a free port (read it back from endpoint()).
  std::string bind_address = "tcp://127.0.0.1:0";
  // Threads that run handlers. 0 runs handlers on the I/O thread: right for
  // handlers that only take a lock and enqueue, wrong for lookups.
  int worker_threads = 0;
  // The job's keys: with them the socket is a CURVE server (encrypted, and
  // only clients holding one of the job's key pairs get in; each request
  // says which role's key sent it). Null: plain TCP, anyone may connect
  // (--insecure).
  std::shared_ptr<const JobKeys> keys;
  // The largest frame a client may send; a larger one drops its connection
  // (ZMQ_MAXMSGSIZE) before the server allocates it. 1 GiB: far above a real
  // step's lookups or pushes (W2's are about 1 MB), far below what would
  // exhaust a server.
  int64_t max_frame_bytes = int64_t{1} << 30;
  ConnectionLimits connections;
};

namespace rpc_internal {
struct ReplySink;
}

// Sends exactly one reply for one request. Movable, not copyable. A Responder
// destroyed without replying answers INTERNAL, so a client never waits on a
// request a handler forgot. Thread-safe: may be used from any thread, also
// after the server stopped (the reply is then dropped).
class Responder {
 public:
  Responder() = default;
  // `received` and `request_bytes`: when the request arrived and its size,
  // for the server's metrics.
  Responder(std::shared_ptr<rpc_internal::ReplySink> sink, std::string routing_id, Header request,
            Role peer_role = Role::kNone,
            std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now(),
            size_t request_bytes = 0);
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  const Header& request_header() const { return request_; }
  // Who sent the request: the role whose CURVE key its connection holds
  // (kNone on a plain socket), and its connection's routing id, which a
  // client keeps across reconnects (RpcClient::routing_id()).
  Role peer_role() const { return peer_role_; }
  const std::string& routing_id() const { return routing_id_; }
  bool valid() const { return sink_ != nullptr; }

  void Reply(Message&& reply);
  // An error reply carrying `status` (which must not be OK).
  void ReplyError(const Status& status);
  // OK reply with no frames.
  void ReplyOk();

 private:
  std::shared_ptr<rpc_internal::ReplySink> sink_;
  std::string routing_id_;
  Header request_;
  Role peer_role_ = Role::kNone;
  std::chrono::steady_clock::time_point received_;
  size_t request_bytes_ = 0;
};

// Whether `r` came from the connection `bound` (a routing id; "" is no one's)
// holding `role`'s key (any key, on a plain socket): PERMISSION_DENIED, naming
// the request and `who` it speaks for, otherwise. The one check behind "a
// member speaks only from the connection it is bound to" on every server.
Status CheckSender(const Responder& r, Role role, const std::string& bound, const std::string& who);

using RpcHandler = std::function<void(Message&& request, Responder responder)>;

class RpcServer {
 public:
  // Binds and starts the I/O thread (and workers).
  static StatusOr<std::unique_ptr<RpcServer>> Start(const RpcServerOptions& options, RpcHandler handler);
  ~RpcServer();

  // The resolved address clients connect to, e.g. "tcp://127.0.0.1:40123".
  const std::string& endpoint() const { return endpoint_; }

  // Per opcode: requests answered, error replies, bytes in and out, latency
  // from arrival to reply; and the requests waiting for a worker.
  // `labels` name this server (role=...).
  void WriteMetrics(PrometheusText* out, const MetricLabels& labels) const;

  // Runs `task` on a worker thread, after the requests already waiting
  // (inline where the server has no workers): a handler hands work it
  // cannot start itself to the other workers, e.g. the lookups a sync step
  // released all at once. A task still waiting at Stop is destroyed unrun.
  void Post(std::function<void()> task);

  // Stops receiving, finishes handlers already running, sends the replies
  // they produced, joins every thread. Idempotent.
  void Stop();

 private:
  RpcServer() = default;
  void IoLoop();
  void WorkerLoop();
  void Dispatch(std::string routing_id, Role peer_role, Message&& request);
  // Answers the ZAP requests libzmq makes for each handshake: the key (with
  // keys) and the connections from the client's address. I/O thread.
  void AnswerZap();
  // Takes the listening socket's accepted and disconnected events into
  // connections_, closing a connection over max_connections. I/O thread.
  void ReadMonitor();

  RpcHandler handler_;
  std::string endpoint_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::shared_ptr<const JobKeys> keys_;
  std::unique_ptr<zmq::socket_t> zap_;      // the context's ZAP handler (REP)
  std::unique_ptr<zmq::socket_t> monitor_;  // socket_'s connection events (PAIR)
  int port_ = -1;                           // where socket_ listens
  PeerConnections connections_{0, 0};       // I/O thread
  // For the metrics: connections open, and those refused for a limit.
  std::atomic<int64_t> open_connections_{0};
  std::atomic<int64_t> refused_per_peer_{0};
  std::atomic<int64_t> refused_total_{0};
  std::shared_ptr<rpc_internal::ReplySink> sink_;
  std::atomic<bool> stop_{false};
  std::thread io_thread_;
  // Requests sent again after a reset connection are served once. I/O thread.
  RecentReplies recent_;

  struct Work {
    std::string routing_id;
    Role peer_role = Role::kNone;
    Message request;
    std::chrono::steady_clock::time_point received;
    size_t bytes = 0;
    std::function<void()> task;  // Post's, instead of a request
  };
  mutable std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<Work> work_;  // GUARDED_BY(work_mu_)
  bool workers_done_ = false;  // GUARDED_BY(work_mu_)
  std::vector<std::thread> workers_;
  std::once_flag stop_once_;
};

}  // namespace tessera
