// ListeningClock: the master counts a member's silence only over time in
// which it could have heard the member.
//
// A master that did not run for a while (SIGSTOP, a frozen VM, a machine
// starved of CPU) finds, when it wakes, every member silent for that long;
// the heartbeats sent meanwhile wait unread in its sockets. Without this it
// would declare a healthy server or trainer lost and roll the job back.
// Every check of silence notes itself here first; a gap between two checks
// longer than `pause` is taken for such a pause, and silence then counts
// from its end. (Checks run every 50-100 ms while anyone's silence matters,
// so a gap that long means the process was not running them; the worst a
// long busy stretch can cost is a real death found one peer timeout later.)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tessera {

class ListeningClock {
 public:
  using Clock = std::chrono::steady_clock;

  // The pause for a job whose peer timeout is `peer_timeout`: a second, or
  // half the timeout if that is less.
  static Clock::duration PauseFor(Clock::duration peer_timeout) {
    return std::min<Clock::duration>(std::chrono::seconds(1), peer_timeout / 2);
  }

  explicit ListeningClock(Clock::duration pause = std::chrono::seconds(1)) : pause_(pause) {}

  // Notes a check of silence at `now`. Returns the length of the pause that
  // ended with it, zero when there was none.
  Clock::duration Check(Clock::time_point now) {
    Clock::duration paused = Clock::duration::zero();
    if (last_check_ != Clock::time_point() && now - last_check_ > pause_) {
      paused = now - last_check_;
      resumed_at_ = now;
      ++pauses_;
    }
    last_check_ = std::max(last_check_, now);
    return paused;
  }

  // When a member last heard at `last_heard` counts as last heard: not
  // before the end of the latest pause.
  Clock::time_point Heard(Clock::time_point last_heard) const { return std::max(last_heard, resumed_at_); }

  int64_t pauses() const { return pauses_; }

 private:
  Clock::duration pause_;
  Clock::time_point last_check_;
  Clock::time_point resumed_at_;
  int64_t pauses_ = 0;
};

}  // namespace tessera
