// SessionMetrics: a Python trainer's Prometheus endpoint. It serves the C++
// trainer's families and labels (TrainerMetrics, role="trainer", rank=R),
// so that one dashboard and one set of alerts cover both kinds of trainer.
//
// What the session does itself it records itself: the lookups (time, bytes,
// the batch's examples) and the pushes (time to send and to be taken). Only
// the loss comes from the user's loop (RecordLoss). A step spans from its
// training lookup to the servers taking its gradients; the session learns
// that at the next training lookup or at Finish, so a step is recorded then
// and a scrape in between sees one step fewer. The phases of a step that
// are the user's (its model, optimizer, data, allreduce) are one figure,
// "dense": what is left of the step after the lookup and the push.
//
// Record* are called from the session's thread only; scrapes run on the
// endpoint's threads and read the figures under TrainerMetrics' lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/metrics_http.h"
#include "common/prometheus_text.h"
#include "common/status.h"
#include "trainer/trainer_metrics.h"

namespace tessera {

class SessionMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  // Serves on `address`:`port` when port >= 0 (0: any free port), nothing
  // when it is negative (figures are kept either way: a step's worth of
  // arithmetic). Fails, serving nothing, when the port cannot be bound.
  static StatusOr<std::unique_ptr<SessionMetrics>> Start(const std::string& address, int port, int rank);

  // "http://ADDRESS:PORT/metrics", or "" when not serving.
  std::string url() const { return server_ ? server_->url() : std::string(); }

  // A training lookup of `examples` examples that began at `began` (the
  // step's start) has returned.
  void RecordLookup(Clock::time_point began, int64_t examples, int64_t bytes_sent, int64_t bytes_received);
  // Time spent sending the step's gradients or waiting for them to be taken.
  void RecordPushTime(double seconds);
  // The user's loss for the step in flight, summed over `examples`; several
  // calls in one step add up.
  void RecordLoss(double loss_sum, int64_t examples);
  // The step in flight is over (its gradients were taken): `step` is its
  // index in the job, as the C++ trainer's step gauge.
  void RecordStepDone(int64_t step, int64_t generation);

 private:
  SessionMetrics() = default;

  int rank_ = 0;
  // The step in flight.
  Clock::time_point began_;
  double lookup_s_ = 0, push_s_ = 0;
  int64_t examples_ = 0, bytes_sent_ = 0, bytes_received_ = 0;
  double loss_sum_ = 0;
  int64_t loss_examples_ = 0;
  // A step whose loop recorded no loss shows the last one recorded.
  double last_loss_ = 0;

  TrainerMetrics figures_;
  MetricsRegistry registry_{"trainer"};
  // Last, so that it stops serving before what it reads goes.
  std::unique_ptr<MetricsHttpServer> server_;
};

}  // namespace tessera
