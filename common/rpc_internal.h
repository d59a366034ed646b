// Shared plumbing of RpcServer and RpcClient: a queue that other threads fill
// and the I/O thread drains, with an eventfd that wakes the I/O thread's poll.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>

#include "common/prometheus_text.h"
#include "common/status.h"
#include "common/wire_format.h"

namespace tessera::rpc_internal {

// An eventfd the I/O thread polls next to its sockets.
class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;
  int fd() const { return fd_; }
  void Signal();
  void Drain();

 private:
  int fd_ = -1;
};

struct OutgoingReply {
  std::string routing_id;
  Message message;
};

// What a server answered, per opcode, for its metrics (RpcServer::
// WriteMetrics). Lock-free: recorded by whichever thread replies.
struct OpStats {
  std::atomic<uint64_t> errors{0}, bytes_in{0}, bytes_out{0};
  // From the request's arrival to its reply. Its count is the requests
  // answered: one figure, so that a scrape's requests_total and
  // latency_seconds_count agree while requests are recorded.
  LatencyHistogram latency;
};
constexpr size_t kOpSlots = 64;  // every Opcode's value is below this

// A message's bytes on the wire: header and frames.
size_t MessageBytes(const Message& m);

// Replies waiting for the server's I/O thread to send them.
struct ReplySink {
  std::array<OpStats, kOpSlots> ops;
  void Record(const Header& request, size_t request_bytes, const Message& reply,
              std::chrono::steady_clock::time_point received);

  std::mutex mu;
  std::deque<OutgoingReply> queue;  // GUARDED_BY(mu)
  bool closed = false;              // GUARDED_BY(mu)
  Wakeup wakeup;

  void Push(std::string routing_id, Message&& m);
};

}  // namespace tessera::rpc_internal
