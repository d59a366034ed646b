// TrainerMetrics: a trainer's figures for its Prometheus endpoint
// (--metrics_port), recorded by the training loop after every step, from the
// same values it writes to the metrics JSONL, so the two always agree.
//
// One lock for all of them: a scrape sees the figures of one step boundary
// (steps_total, examples_total and the time counters of the same steps).
#pragma once

#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/prometheus_text.h"

namespace tessera {

// Seconds of one step's phases (training_loop.cc's t0..t5).
struct StepPhases {
  double data = 0, lookup = 0, dense = 0, allreduce = 0, push = 0;
  double total = 0;
};

class TrainerMetrics {
 public:
  void RecordStep(int64_t step, int64_t generation, int64_t epoch, double loss, int64_t examples,
                  const StepPhases& phases, int64_t lookup_bytes_sent, int64_t lookup_bytes_received);
  // Trainer 0's evaluation after `step` steps: {examples, log_loss, auc}.
  void RecordEvaluation(int64_t step, const nlohmann::json& eval);
  void Write(PrometheusText* out, int rank) const;

 private:
  mutable std::mutex mu_;
  int64_t steps_ = 0, examples_ = 0;  // GUARDED_BY(mu_), this process's
  int64_t step_ = -1, generation_ = 0, epoch_ = 0;
  double loss_ = 0;
  StepPhases seconds_;  // summed
  int64_t bytes_sent_ = 0, bytes_received_ = 0;
  double last_examples_per_s_ = 0;
  bool evaluated_ = false;
  int64_t eval_step_ = 0, eval_examples_ = 0;
  double eval_auc_ = 0, eval_log_loss_ = 0;
  LatencyHistogram step_seconds_;
};

}  // namespace tessera
