// SignalWatcher: a role's SIGTERM, SIGINT or SIGUSR1 taken by one thread of
// the role's choice, whichever of the process's threads the kernel
// delivers it to.
//
// Blocking the signals in main() before starting any thread, and taking
// them with sigtimedwait, is not enough: a shared library may start threads
// before main() runs (OpenBLAS starts its pool from its constructor, and a
// build that links it without --as-needed, as clang's does, gives the
// server that pool). A signal the kernel hands to such a thread takes its
// default action, and a server told to drain by SIGTERM exited 143 at once,
// its rows not handed over. So each signal gets a handler, which only
// writes the signal's number to a pipe (async-signal-safe), and Next()
// reads it there: signals that arrive before anyone asks wait in the pipe.
//
// One watcher per process at a time (the handler finds the pipe through a
// global); the destructor restores the signals' previous dispositions.
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <vector>

#include "common/status.h"

namespace tessera {

class SignalWatcher {
 public:
  // FAILED_PRECONDITION while another watcher exists; INVALID_ARGUMENT for
  // a number that is no signal; INTERNAL where the pipe or a handler cannot
  // be set up.
  static StatusOr<std::unique_ptr<SignalWatcher>> Start(const std::vector<int>& signals);
  ~SignalWatcher();

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // The next signal that arrived (in order of arrival), waiting up to
  // `timeout` for one; 0 if none came. One thread at a time.
  int Next(std::chrono::milliseconds timeout);

 private:
  SignalWatcher() = default;

  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  int read_fd_ = -1, write_fd_ = -1;
};

}  // namespace tessera
