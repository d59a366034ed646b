#include "common/signal_watcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace tessera {
namespace {

std::atomic<bool> g_active{false};
// The pipe's write end, for the handler.
std::atomic<int> g_write_fd{-1};

// Async-signal-safe: a write to a non-blocking pipe. (A signal that finds
// the pipe full, 64 KiB of signals nobody read, is dropped.)
void WriteSignal(int signal) {
  const int saved = errno;
  const int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(signal);
    (void)!write(fd, &b, 1);
  }
  errno = saved;
}

}  // namespace

StatusOr<std::unique_ptr<SignalWatcher>> SignalWatcher::Start(const std::vector<int>& signals) {
  for (int s : signals) {
    if (s <= 0 || s >= NSIG) return Status::InvalidArgument("no such signal: " + std::to_string(s));
  }
  bool expected = false;
  if (!g_active.compare_exchange_strong(expected, true)) {
    return Status::FailedPrecondition("a signal watcher is already running in this process");
  }
  std::unique_ptr<SignalWatcher> w(new SignalWatcher());
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_active = false;
    return Status::Internal(std::string("signal watcher: pipe2: ") + strerror(errno));
  }
  w->read_fd_ = fds[0];
  w->write_fd_ = fds[1];
  g_write_fd = w->write_fd_;
  struct sigaction action {};
  action.sa_handler = WriteSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int s : signals) {
    struct sigaction previous {};
    if (sigaction(s, &action, &previous) != 0) {
      const std::string why = strerror(errno);
      w.reset();  // restores those set so far
      return Status::Internal("signal watcher: sigaction(" + std::to_string(s) + "): " + why);
    }
    w->signals_.push_back(s);
    w->previous_.push_back(previous);
    sigaddset(&unblock, s);
  }
  // Threads started from here on inherit the signals unblocked: the
  // handler may run on any thread.
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  return w;
}

SignalWatcher::~SignalWatcher() {
  for (size_t i = 0; i < previous_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
  g_write_fd = -1;
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
  g_active = false;
}

int SignalWatcher::Next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    unsigned char b = 0;
    if (read(read_fd_, &b, 1) == 1) return b;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return 0;
    pollfd p{read_fd_, POLLIN, 0};
    poll(&p, 1, static_cast<int>(left));  // EINTR or a timeout: read again, then see
  }
}

}  // namespace tessera
