// Shared plumbing of RpcServer and RpcClient: a queue that other threads fill
// and the I/O thread drains, with an eventfd that wakes the I/O thread's poll.
#pragma once

#include <deque>
#include <mutex>
#include <string>

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

// Replies waiting for the server's I/O thread to send them.
struct ReplySink {
  std::mutex mu;
  std::deque<OutgoingReply> queue;  // GUARDED_BY(mu)
  bool closed = false;              // GUARDED_BY(mu)
  Wakeup wakeup;

  void Push(std::string routing_id, Message&& m);
};

}  // namespace tessera::rpc_internal
