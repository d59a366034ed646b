// RpcClient: one I/O thread that owns a DEALER socket per peer and matches
// replies to requests by request id. Any thread may start calls; many may be
// in flight at once, to one peer or several.
//
// Every call has a deadline: when no reply has come by then, the call ends
// with DEADLINE_EXCEEDED (a reply arriving later is dropped). An error reply
// ends the call with the Status it carries. Calls still pending when the
// client is destroyed end with CANCELLED.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/job_keys.h"
#include "common/status.h"
#include "common/wire_format.h"

namespace tessera {

namespace rpc_internal {
class Wakeup;
}

using RpcCallback = std::function<void(StatusOr<Message>)>;

// The result of an asynchronous call; Wait() blocks until it has one.
class RpcFuture {
 public:
  RpcFuture();
  StatusOr<Message> Wait();
  // Whether the result came within `timeout` (then Wait returns at once).
  bool WaitFor(std::chrono::milliseconds timeout) const;
  bool Ready() const;

 private:
  friend class RpcClient;
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::optional<StatusOr<Message>> result;
  };
  std::shared_ptr<State> state_;
};

class RpcClient {
 public:
  // With `keys`, every connection is a CURVE client holding this process's
  // role's key pair; without, plain TCP (--insecure).
  static StatusOr<std::unique_ptr<RpcClient>> Create(std::shared_ptr<const JobKeys> keys = nullptr);
  ~RpcClient();

  // Connects a new DEALER to `endpoint` ("tcp://host:port"), a server of
  // role `server_role` (whose public key it must prove to hold; required
  // with keys); returns its peer index. ZeroMQ connects in the background: a
  // peer that is not up yet gets its requests when it comes up, or they time
  // out. When the server refuses this process's key, the calls to it end at
  // once with PERMISSION_DENIED, and so do later ones until a connection
  // succeeds.
  StatusOr<int> Connect(const std::string& endpoint, Role server_role = Role::kNone);

  // The routing id every connection of this client presents: random, made
  // at Create and kept across reconnects, so a server can tell this client's
  // requests from anyone else's (the master binds a member to it at
  // registration).
  const std::string& routing_id() const { return routing_id_; }

  // Sends `request` to `peer`. `done` runs exactly once, on the I/O thread:
  // it must not block.
  void CallAsync(int peer, Message&& request, std::chrono::milliseconds timeout, RpcCallback done);
  RpcFuture Call(int peer, Message&& request, std::chrono::milliseconds timeout);
  StatusOr<Message> CallSync(int peer, Message&& request, std::chrono::milliseconds timeout);

  // Ends every call to `peer` that is in flight now with `why` (not OK),
  // without waiting for its deadline: a trainer drops the requests of a job
  // configuration the master has replaced (a lost server may never answer).
  // A reply that still arrives is dropped. Calls started later are unaffected.
  void CancelCalls(int peer, const Status& why);

  // Closes the connection to `peer` (a server that left the job) for good:
  // its calls, those in flight and later ones, end CANCELLED, and
  // ZeroMQ stops reconnecting to it. Its index is not reused.
  void Disconnect(int peer);

  // When the TCP connection to `peer` closed and has not come back since
  // (ZeroMQ reconnects by itself); nullopt while it is up or before it was
  // first made. A process that dies closes its connections at once, so a
  // connection down for a second is a faster sign of a crash than silence;
  // a hung process keeps them up.
  std::optional<std::chrono::steady_clock::time_point> DisconnectedSince(int peer) const;

  // The state of the connection to `peer` in words, for an error that says
  // a server or the master does not answer: up or down since when, how
  // often it connected and dropped, how many calls went again, how many
  // wait for a reply and how many for the socket to take them.
  std::string DescribeLink(int peer) const;

 private:
  RpcClient() = default;
  void IoLoop();
  // Takes the connection events of `peer`'s socket. I/O thread.
  void ReadMonitor(int peer);
  // After ReadMonitor: sends the calls waiting on `peer` again when its
  // connection came back after a reset. I/O thread.
  void ResendAfterReset(int peer);
  // Whether `peer` refused our key, and the error its calls end with.
  bool Refused(int peer) const;
  Status RefusedStatus(int peer) const;

  struct Outgoing {
    int peer;
    Message message;
    std::chrono::steady_clock::time_point deadline;
    RpcCallback done;
  };
  // For DescribeLink: each peer's calls in pending_ and in `waiting`. I/O
  // thread, once a round.
  void CountCalls(const std::deque<Outgoing>& waiting);
  struct Pending {
    std::chrono::steady_clock::time_point deadline;
    RpcCallback done;
    int peer;
    // The request (its frames shared), to send again after a reset.
    Message request;
  };
  struct ConnectRequest {
    std::string endpoint;
    Role server_role;
    std::function<void(StatusOr<int>)> done;
  };

  std::unique_ptr<zmq::context_t> context_;
  std::shared_ptr<const JobKeys> keys_;
  std::string routing_id_;
  std::unique_ptr<rpc_internal::Wakeup> wakeup_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<bool> stop_{false};
  std::thread io_thread_;

  std::mutex mu_;
  std::deque<Outgoing> outgoing_;          // GUARDED_BY(mu_)
  std::deque<ConnectRequest> connects_;    // GUARDED_BY(mu_)
  // CancelCalls requests: the peer, the reason, and the first request id
  // not to cancel (calls started after CancelCalls returned).
  struct Cancel {
    int peer;
    Status why;
    uint64_t before_id;
  };
  std::vector<Cancel> cancels_;  // GUARDED_BY(mu_)
  std::vector<int> disconnects_;  // GUARDED_BY(mu_)

  // Each peer's connection: up, or down since when (from its socket's
  // monitor events).
  struct Link {
    bool ever_connected = false;
    std::optional<std::chrono::steady_clock::time_point> down_since;
    // The server refused our key (a CURVE handshake failed on
    // authentication); cleared when a connection succeeds.
    bool refused = false;
    // ... because too many connections from this host were open to it
    // (RpcServerOptions::max_connections_per_peer), not for our key.
    bool too_many_connections = false;
    // With keys: a TCP connection is up whose handshake has not completed;
    // and how many such closed in a row.
    bool awaiting_handshake = false;
    int handshakeless_closes = 0;
    std::string endpoint;
    // Connected again after a reset: the calls waiting for a reply go again
    // (RecentReplies on the server serves each once).
    bool resend = false;
    // For DescribeLink: how the connection went so far, and its calls as
    // the I/O thread last counted them: sent and waiting for their reply,
    // and not yet taken by the socket.
    int connections = 0, disconnections = 0, resent_calls = 0;
    size_t in_flight = 0, unsent = 0;
  };
  mutable std::mutex links_mu_;
  std::vector<Link> links_;  // GUARDED_BY(links_mu_): by peer

  // Closes a peer's socket and its monitor. I/O thread (or after it ended).
  void CloseLink(int peer);

  // Owned by the I/O thread.
  std::vector<std::unique_ptr<zmq::socket_t>> sockets_;
  std::vector<std::unique_ptr<zmq::socket_t>> monitors_;  // by peer: its socket's events (PAIR)
  std::map<uint64_t, Pending> pending_;
};

}  // namespace tessera
