// StepBarrier: where the trainers meet at a step boundary (a checkpoint, a
// change of the job's servers). Each trainer arrives with the step it stopped
// before and something to answer it with later; the barrier is complete when
// every trainer still training has arrived at one step.
//
// Trainers decide where to stop together (periodic boundaries, or an
// allreduce of who saw a request), so arrivals at different steps are a bug
// in that agreement: Check says so instead of letting the job hang.
//
// Not thread-safe: the master calls it under its lock. Generic over the
// waiter so that tests need no sockets.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

template <typename Waiter>
class StepBarrier {
 public:
  enum class Outcome { kWaiting, kComplete, kMismatch };

  explicit StepBarrier(int world = 0) : arrivals_(world) {}

  // Records `rank`'s arrival at `step`; a second arrival of the same rank
  // (a retried call) replaces the first. REQUIRES: 0 <= rank < world.
  void Arrive(int rank, int64_t step, Waiter waiter) {
    if (std::none_of(arrivals_.begin(), arrivals_.end(), [](const auto& a) { return a.has_value(); })) {
      first_arrival_ = std::chrono::steady_clock::now();
    }
    arrivals_[rank] = Arrival{step, std::move(waiter)};
  }

  // When the first waiter now in the barrier arrived: the trainers' pause at
  // a boundary starts there (checkpoint costs are measured from it).
  std::chrono::steady_clock::time_point first_arrival() const { return first_arrival_; }

  // Whether every rank for which `training(rank)` holds has arrived, at one
  // step (*step) or at several (*why names two of them). Ranks that no
  // longer train (done) are not waited for; with none training, kWaiting.
  Outcome Check(const std::function<bool(int)>& training, int64_t* step, std::string* why) const {
    int64_t lo = INT64_MAX, hi = -1;
    for (size_t r = 0; r < arrivals_.size(); ++r) {
      if (!training(static_cast<int>(r))) continue;
      if (!arrivals_[r]) return Outcome::kWaiting;
      lo = std::min(lo, arrivals_[r]->step);
      hi = std::max(hi, arrivals_[r]->step);
    }
    if (hi < 0) return Outcome::kWaiting;
    if (lo < hi) {
      *why = "trainers reached the barrier at different steps (" + std::to_string(lo) + " and " +
             std::to_string(hi) + ")";
      return Outcome::kMismatch;
    }
    *step = hi;
    return Outcome::kComplete;
  }

  // Every waiter that has arrived, in rank order; the barrier is empty after.
  std::vector<Waiter> TakeAll() {
    std::vector<Waiter> out;
    for (auto& a : arrivals_) {
      if (a) out.push_back(std::move(a->waiter));
      a.reset();
    }
    return out;
  }

  bool Arrived(int rank) const { return arrivals_[rank].has_value(); }

 private:
  struct Arrival {
    int64_t step = 0;
    Waiter waiter;
  };
  std::vector<std::optional<Arrival>> arrivals_;
  std::chrono::steady_clock::time_point first_arrival_;
};

}  // namespace tessera
