#include "ps/step_gate.h"

#include <algorithm>
#include <string>

namespace tessera {

Status StepGateBase::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

uint64_t StepGateBase::applied_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return applied_steps_;
}

Status StepGateBase::CheckPush(uint32_t trainer, uint64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckPushLocked(trainer, step);
}

Status StepGateBase::WaitApplied(uint64_t step, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  const bool done = applied_cv_.wait_for(lock, timeout, [&] {
    return !sync_ || applied_steps_ >= step || !failure_.ok();
  });
  if (!failure_.ok()) return failure_;
  if (!done) {
    return Status::DeadlineExceeded("gradients of step " + std::to_string(step - 1) + " were not all applied within " +
                                    std::to_string(timeout.count()) + " ms");
  }
  return Status::OK();
}

void StepGateBase::ResetLocked(Consistency mode, int world, uint64_t start_step) {
  sync_ = mode == Consistency::kSync;
  world_ = world;
  applied_steps_ = start_step;
  last_pushed_step_.assign(world, static_cast<int64_t>(start_step) - 1);
  failure_ = Status::OK();
  applied_cv_.notify_all();
}

namespace {

// Whether `step` is more than kMaxStepsAhead past `last` (a trainer's last push).
bool TooFarAhead(uint64_t step, int64_t last) {
  // Tested first, so that the difference below cannot overflow.
  if (step > (uint64_t{1} << 62)) return true;
  return static_cast<int64_t>(step) - last > static_cast<int64_t>(StepGateBase::kMaxStepsAhead);
}

Status TooFarAheadError(const char* what, uint32_t trainer, uint64_t step, int64_t last) {
  return Status::InvalidArgument(std::string(what) + " of trainer " + std::to_string(trainer) + " for step " +
                                 std::to_string(step) + " in async mode: more than " +
                                 std::to_string(StepGateBase::kMaxStepsAhead) + " steps past its last push (" +
                                 std::to_string(last) + ")");
}

}  // namespace

LookupAction StepGateBase::DecideLookupLocked(uint32_t trainer, uint64_t step, bool own_push_pending,
                                              Status* refusal) const {
  if (!failure_.ok()) {
    *refusal = failure_;
    return LookupAction::kRefuse;
  }
  if (!sync_) {
    if (trainer < last_pushed_step_.size() && TooFarAhead(step, last_pushed_step_[trainer])) {
      *refusal = TooFarAheadError("lookup", trainer, step, last_pushed_step_[trainer]);
      return LookupAction::kRefuse;
    }
    return own_push_pending ? LookupAction::kPark : LookupAction::kServe;
  }
  if (step <= applied_steps_) return LookupAction::kServe;
  // Step t+1 waits for step t's gradients of every trainer. A trainer pushed
  // step t only after its lookup of t, which was served once t-1 was applied,
  // so it looks up at most one step past the applied ones. Refusing what is
  // further ahead keeps a client from parking lookups that nothing would
  // ever answer.
  if (step == applied_steps_ + 1) return LookupAction::kPark;
  *refusal = Status::InvalidArgument("lookup for step " + std::to_string(step) + " in sync mode while step " +
                                     std::to_string(applied_steps_) +
                                     " is the next to apply (a trainer is at most one step ahead)");
  return LookupAction::kRefuse;
}

Status StepGateBase::CheckPushLocked(uint32_t trainer, uint64_t step) const {
  if (!failure_.ok()) return failure_;
  if (trainer >= last_pushed_step_.size()) {
    return Status::InvalidArgument("trainer rank " + std::to_string(trainer) + " not in this job");
  }
  if (static_cast<int64_t>(step) <= last_pushed_step_[trainer]) {
    return Status::AlreadyApplied("gradients of trainer " + std::to_string(trainer) + " step " + std::to_string(step) +
                                  " were already applied");
  }
  if (!sync_ && TooFarAhead(step, last_pushed_step_[trainer])) {
    return TooFarAheadError("push", trainer, step, last_pushed_step_[trainer]);
  }
  return Status::OK();
}

Status StepGateBase::AcceptPushLocked(uint32_t trainer, uint64_t step) {
  TESSERA_RETURN_IF_ERROR(CheckPushLocked(trainer, step));
  // A push is computed from its lookup's context, and a lookup is served
  // only once the step before it is applied, so in sync mode every trainer
  // pushes the step being gathered.
  if (sync_ && step != applied_steps_) {
    return Status::InvalidArgument("push for step " + std::to_string(step) + " in sync mode while step " +
                                   std::to_string(applied_steps_) + " is the next to apply");
  }
  // Async pushes of one trainer may be accepted out of step order.
  int64_t& last = last_pushed_step_[trainer];
  last = std::max(last, static_cast<int64_t>(step));
  return Status::OK();
}

bool StepGateBase::MarkAppliedLocked(uint64_t step) {
  if (step != applied_steps_) return false;
  applied_steps_ = step + 1;
  applied_cv_.notify_all();
  return true;
}

Status StepGateBase::FailLocked(const Status& reason) {
  const Status answer = reason.ok() ? Status::Aborted("job aborted") : reason;
  if (failure_.ok()) failure_ = answer;
  applied_cv_.notify_all();
  return answer;
}

}  // namespace tessera
