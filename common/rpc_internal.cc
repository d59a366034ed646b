#include "common/rpc_internal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include <glog/logging.h>

namespace tessera::rpc_internal {

Wakeup::Wakeup() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  PCHECK(fd_ >= 0) << "eventfd";
}

Wakeup::~Wakeup() {
  if (fd_ >= 0) close(fd_);
}

void Wakeup::Signal() {
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: the I/O thread is awake anyway.
  while (write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Wakeup::Drain() {
  uint64_t v;
  while (read(fd_, &v, sizeof(v)) < 0 && errno == EINTR) {
  }
}

size_t MessageBytes(const Message& m) {
  size_t bytes = kHeaderBytes;
  for (const zmq::message_t& f : m.frames) bytes += f.size();
  return bytes;
}

void ReplySink::Record(const Header& request, size_t request_bytes, const Message& reply,
                       std::chrono::steady_clock::time_point received) {
  const size_t slot = static_cast<size_t>(request.op);
  OpStats& s = ops[slot < kOpSlots ? slot : 0];
  if (reply.header.status != StatusCode::kOk) s.errors.fetch_add(1, std::memory_order_relaxed);
  s.bytes_in.fetch_add(request_bytes, std::memory_order_relaxed);
  s.bytes_out.fetch_add(MessageBytes(reply), std::memory_order_relaxed);
  s.latency.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count());
}

void ReplySink::Push(std::string routing_id, Message&& m) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return;
    queue.push_back(OutgoingReply{std::move(routing_id), std::move(m)});
  }
  wakeup.Signal();
}

}  // namespace tessera::rpc_internal
