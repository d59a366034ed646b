#include "python/src/session_metrics.h"

#include <algorithm>

namespace tessera {

StatusOr<std::unique_ptr<SessionMetrics>> SessionMetrics::Start(const std::string& address, int port, int rank) {
  std::unique_ptr<SessionMetrics> m(new SessionMetrics());
  m->rank_ = rank;
  SessionMetrics* self = m.get();
  m->registry_.Add([self](PrometheusText* out) { self->figures_.Write(out, self->rank_); });
  TESSERA_ASSIGN_OR_RETURN(m->server_, MaybeServeMetrics(address, port, &m->registry_));
  return m;
}

void SessionMetrics::RecordLookup(Clock::time_point began, int64_t examples, int64_t bytes_sent,
                                  int64_t bytes_received) {
  began_ = began;
  lookup_s_ = std::chrono::duration<double>(Clock::now() - began).count();
  push_s_ = 0;
  examples_ = examples;
  bytes_sent_ = bytes_sent;
  bytes_received_ = bytes_received;
  loss_sum_ = 0;
  loss_examples_ = 0;
}

void SessionMetrics::RecordPushTime(double seconds) { push_s_ += seconds; }

void SessionMetrics::RecordLoss(double loss_sum, int64_t examples) {
  loss_sum_ += loss_sum;
  loss_examples_ += examples;
}

void SessionMetrics::RecordStepDone(int64_t step, int64_t generation) {
  if (loss_examples_ > 0) last_loss_ = loss_sum_ / static_cast<double>(loss_examples_);
  StepPhases phases;
  phases.total = std::chrono::duration<double>(Clock::now() - began_).count();
  phases.lookup = lookup_s_;
  phases.push = push_s_;
  // (Rounding can leave a hair below zero.)
  phases.dense = std::max(0.0, phases.total - lookup_s_ - push_s_);
  // The epoch is the loop's own (its data), which the session never sees.
  figures_.RecordStep(step, generation, /*epoch=*/0, last_loss_, examples_, phases, bytes_sent_, bytes_received_);
}

}  // namespace tessera
