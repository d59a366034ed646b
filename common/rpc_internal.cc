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

void ReplySink::Push(std::string routing_id, Message&& m) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return;
    queue.push_back(OutgoingReply{std::move(routing_id), std::move(m)});
  }
  wakeup.Signal();
}

}  // namespace tessera::rpc_internal
