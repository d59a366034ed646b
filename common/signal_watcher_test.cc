#include "common/signal_watcher.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tessera {
namespace {

using std::chrono::milliseconds;

// A thread as a library starts before main(): the signals not blocked in it.
class ForeignThread {
 public:
  ForeignThread() : thread_([this] { Park(); }) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return started_; });
  }
  ~ForeignThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  pthread_t handle() { return thread_.native_handle(); }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void Park() {
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    std::unique_lock<std::mutex> lock(mu_);
    started_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return stop_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, stop_ = false;
  std::thread thread_;
};

TEST(SignalWatcherTest, ASignalDeliveredToAnyThreadIsTakenByNext) {
  ForeignThread foreign;
  auto w = SignalWatcher::Start({SIGUSR2});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->Next(milliseconds(0)), 0);
  // Without the watcher's handler this would end the test process (the
  // default action of SIGUSR2), as SIGTERM ended a server whose OpenBLAS
  // threads received it.
  ASSERT_EQ(pthread_kill(foreign.handle(), SIGUSR2), 0);
  EXPECT_EQ((*w)->Next(milliseconds(10000)), SIGUSR2);
  EXPECT_EQ((*w)->Next(milliseconds(50)), 0);
}

TEST(SignalWatcherTest, SignalsWaitUntilAskedForAndComeInOrder) {
  auto w = SignalWatcher::Start({SIGUSR1, SIGUSR2});
  ASSERT_TRUE(w.ok()) << w.status();
  // raise() runs the handler before it returns: both wait in the pipe.
  ASSERT_EQ(raise(SIGUSR2), 0);
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ((*w)->Next(milliseconds(10000)), SIGUSR2);
  EXPECT_EQ((*w)->Next(milliseconds(10000)), SIGUSR1);
  EXPECT_EQ((*w)->Next(milliseconds(0)), 0);
  // A wait ends when one comes.
  std::thread later([] {
    std::this_thread::sleep_for(milliseconds(100));
    kill(getpid(), SIGUSR1);
  });
  EXPECT_EQ((*w)->Next(milliseconds(10000)), SIGUSR1);
  later.join();
}

std::atomic<int> g_previous_handler_calls{0};
void PreviousHandler(int) { g_previous_handler_calls.fetch_add(1); }

TEST(SignalWatcherTest, OnlyOneAtATimeAndTheOldHandlersComeBackAfterIt) {
  struct sigaction mine {};
  mine.sa_handler = PreviousHandler;
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGUSR2, &mine, &before), 0);
  {
    auto w = SignalWatcher::Start({SIGUSR2});
    ASSERT_TRUE(w.ok()) << w.status();
    auto second = SignalWatcher::Start({SIGUSR1});
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status();
    ASSERT_EQ(raise(SIGUSR2), 0);
    EXPECT_EQ(g_previous_handler_calls.load(), 0);
    EXPECT_EQ((*w)->Next(milliseconds(10000)), SIGUSR2);
  }
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_EQ(g_previous_handler_calls.load(), 1);
  // And a new one may start once the first is gone.
  EXPECT_TRUE(SignalWatcher::Start({SIGUSR1}).ok());
  sigaction(SIGUSR2, &before, nullptr);
}

TEST(SignalWatcherTest, NoSuchSignalIsRefused) {
  EXPECT_EQ(SignalWatcher::Start({0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SignalWatcher::Start({NSIG}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
