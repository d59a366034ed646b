// StepGate: the parameter server's consistency rules (DESIGN.md §4 step 6, §5)
// as a class of its own: it decides what a lookup or push of a step may do
// now and keeps what must wait. It computes nothing and answers nothing: its
// owner (PsService) decodes a request, asks the gate, computes and replies.
//
//   sync   Step t's pushes are parked until all `world` trainers' are in;
//          the push that completes the step gets them back in rank order,
//          its caller applies them and calls Applied(t). A lookup of step
//          t+1 is parked until then (Applied hands it back); one further
//          ahead is refused.
//   async  Lookups are served and pushes applied on arrival, but not those
//          of a step more than kMaxStepsAhead past the trainer's last push:
//          no trainer is there, and a push accepted at such a step would make
//          every later one of that trainer ALREADY_APPLIED. One exception: a
//          lookup of step t whose trainer's own push of t-1 is still to come
//          to this server (its owner says so: it knows the contexts) is
//          parked until that push settles (OwnPushSettled), so that a
//          prefetched lookup sees its trainer's last update as one sent
//          after the push does. Other trainers' pushes are not waited for.
//
// Exactly once: a push at or below the last step accepted for its trainer is
// ALREADY_APPLIED. A parked push counts as accepted: it is applied with its
// step, or the gate fails.
//
// Failure: Abort (the job ends, or applying a step failed) refuses every
// later lookup and push with its reason until Reset, and hands back the
// parked lookups to be answered with it. Reset (a new plan) hands them back
// to be answered PLAN_CHANGED.
//
// Thread safety: every method may be called from any thread. The gate calls
// nothing of its caller's while it holds its lock, so a caller may hold a
// lock of its own around a call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"

namespace tessera {

// What to do with a lookup now.
enum class LookupAction {
  kServe,   // serve it
  kPark,    // the gate keeps it until the step before it is applied
  kRefuse,  // answer it with the refusal
};

// Parked lookups handed back: to serve (status OK) or to answer with status.
template <typename Lookup>
struct ReleasedLookups {
  Status status;
  std::vector<Lookup> lookups;
};

// What a StepGate knows whatever it parks: which steps are applied, which
// step each trainer pushed last, whether the gate failed.
class StepGateBase {
 public:
  // Async: how far past its last push a trainer's lookup or push may be.
  // A trainer pushes each step before it looks up the one after the next
  // (prefetch looks one ahead); 64 is also the most contexts it may hold.
  static constexpr uint64_t kMaxStepsAhead = 64;
  // Lookups one trainer may have parked at once. A correct trainer parks one
  // (its prefetch), two with a retry; more are a client filling this
  // server's memory with requests it will answer only later.
  static constexpr size_t kMaxParkedPerTrainer = 4;

  // The reason the gate failed (Abort), or OK.
  Status failure() const;
  // Sync: the next step to apply (all before it are). Async: the start step.
  uint64_t applied_steps() const;

  // Whether a push of (trainer, step) may go on to be computed: the gate's
  // failure, ALREADY_APPLIED, INVALID_ARGUMENT for a trainer outside the
  // world, or OK. Changes nothing (OnPush decides).
  Status CheckPush(uint32_t trainer, uint64_t step) const;

  // Blocks until every step before `step` is applied (sync mode; async
  // returns at once) or the gate fails. Returns OK, the gate's failure, or
  // DEADLINE_EXCEEDED once `timeout` passed.
  Status WaitApplied(uint64_t step, std::chrono::milliseconds timeout) const;

 protected:
  StepGateBase() = default;
  ~StepGateBase() = default;

  // REQUIRES for all below: mu_ held.
  void ResetLocked(Consistency mode, int world, uint64_t start_step);
  // own_push_pending: async, the trainer's push of step-1 is still to come.
  LookupAction DecideLookupLocked(uint32_t trainer, uint64_t step, bool own_push_pending, Status* refusal) const;
  Status CheckPushLocked(uint32_t trainer, uint64_t step) const;
  // CheckPushLocked, and in sync mode `step` must be the one being gathered;
  // on OK the push is accepted: the trainer's last pushed step moves.
  Status AcceptPushLocked(uint32_t trainer, uint64_t step);
  // True if `step` was the next to apply (false: Reset since); it now is applied.
  bool MarkAppliedLocked(uint64_t step);
  // Fails the gate (a first failure stays); returns what to answer with.
  Status FailLocked(const Status& reason);

  mutable std::mutex mu_;
  bool sync_ = false;  // GUARDED_BY(mu_)
  int world_ = 0;      // GUARDED_BY(mu_)

 private:
  mutable std::condition_variable applied_cv_;  // applied_steps_ moved or the gate failed
  uint64_t applied_steps_ = 0;                  // GUARDED_BY(mu_)
  std::vector<int64_t> last_pushed_step_;       // GUARDED_BY(mu_), per trainer
  Status failure_;                              // GUARDED_BY(mu_)
};

// Push: what a push parks until its step is complete (its row gradients).
// Lookup: a parked lookup (the request and whom to answer). Both movable.
template <typename Push, typename Lookup>
class StepGate : public StepGateBase {
 public:
  using Released = ReleasedLookups<Lookup>;

  // Starts a job of `world` trainers whose steps before `start_step` are
  // done (a resumed job starts at its checkpoint's step). Clears the failure
  // and the parked pushes; hands back the parked lookups, PLAN_CHANGED.
  Released Reset(Consistency mode, int world, uint64_t start_step) {
    std::lock_guard<std::mutex> lock(mu_);
    ResetLocked(mode, world, start_step);
    ClearPushesLocked();
    return {Status::PlanChanged("a new plan replaced the one this lookup was made under while it waited; "
                                "look up again under the new plan"),
            TakeParkedLocked()};
  }

  // Trainer `trainer`'s lookup of `step`. kPark: the gate took *lookup
  // (Applied, OwnPushSettled, Reset or Abort hands it back). kServe, kRefuse
  // (*refusal says why): *lookup is untouched. own_push_pending (async
  // only): the trainer's push of step-1 is still to come to this server.
  LookupAction OnLookup(uint32_t trainer, uint64_t step, Lookup* lookup, Status* refusal,
                        bool own_push_pending = false) {
    std::lock_guard<std::mutex> lock(mu_);
    LookupAction action = DecideLookupLocked(trainer, step, own_push_pending, refusal);
    if (action == LookupAction::kPark) {
      size_t parked = 0;
      for (const Parked& p : parked_) parked += p.trainer == trainer;
      if (parked >= kMaxParkedPerTrainer) {
        *refusal = Status::ResourceExhausted("trainer " + std::to_string(trainer) + " has " + std::to_string(parked) +
                                             " lookups waiting on this server, the most it may have");
        return LookupAction::kRefuse;
      }
      parked_.push_back({trainer, step, std::move(*lookup)});
    }
    return action;
  }

  // A push whose payload the caller computed. Returns the payloads to apply
  // now: async, this one; sync, none until the step's last push, then all
  // `world` of them in rank order, and the caller applies them and calls
  // Applied(step) (or Abort). Errors: those of CheckPush, and in sync mode
  // a step other than the next to apply.
  StatusOr<std::vector<Push>> OnPush(uint32_t trainer, uint64_t step, Push push) {
    std::lock_guard<std::mutex> lock(mu_);
    TESSERA_RETURN_IF_ERROR(AcceptPushLocked(trainer, step));
    std::vector<Push> ready;
    if (!sync_) {
      ready.push_back(std::move(push));
      return ready;
    }
    step_pushes_[trainer] = std::move(push);
    if (++received_ < world_) return ready;
    for (std::optional<Push>& p : step_pushes_) ready.push_back(std::move(*p));
    ClearPushesLocked();
    return ready;
  }

  // Sync: the payloads OnPush handed back for `step` are applied. Hands back
  // the lookups of step+1 to serve (none if the gate was Reset since).
  Released Applied(uint64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!MarkAppliedLocked(step)) return {};
    return {Status::OK(), TakeParkedLocked()};
  }

  // Async: trainer `trainer`'s push of `step` is applied, or will never be
  // (refused, its context expired). Hands back that trainer's lookups of
  // step+1, to serve.
  Released OwnPushSettled(uint32_t trainer, uint64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    Released released;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->trainer == trainer && it->step == step + 1) {
        released.lookups.push_back(std::move(it->lookup));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    return released;
  }

  // Fails the gate with `reason` (ABORTED if OK) and drops the parked
  // pushes; hands back the parked lookups to answer with `reason`.
  Released Abort(const Status& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    Status answer = FailLocked(reason);
    ClearPushesLocked();
    return {std::move(answer), TakeParkedLocked()};
  }

 private:
  void ClearPushesLocked() {
    step_pushes_.clear();
    step_pushes_.resize(world_);
    received_ = 0;
  }

  std::vector<Lookup> TakeParkedLocked() {
    std::vector<Lookup> lookups;
    lookups.reserve(parked_.size());
    for (Parked& p : parked_) lookups.push_back(std::move(p.lookup));
    parked_.clear();
    return lookups;
  }

  // Sync: the pushes of step applied_steps(), by trainer rank, until all are in.
  std::vector<std::optional<Push>> step_pushes_;  // GUARDED_BY(mu_)
  int received_ = 0;                              // GUARDED_BY(mu_)
  // Sync: lookups of step applied_steps() + 1. Async: lookups waiting for
  // their trainer's push of the step before.
  struct Parked {
    uint32_t trainer;
    uint64_t step;
    Lookup lookup;
  };
  std::vector<Parked> parked_;  // GUARDED_BY(mu_)
};

}  // namespace tessera
