#include "trainer/trainer_metrics.h"

#include <string>

namespace tessera {

void TrainerMetrics::RecordStep(int64_t step, int64_t generation, int64_t epoch, double loss, int64_t examples,
                                const StepPhases& phases, int64_t lookup_bytes_sent, int64_t lookup_bytes_received) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  examples_ += examples;
  step_ = step;
  generation_ = generation;
  epoch_ = epoch;
  loss_ = loss;
  seconds_.data += phases.data;
  seconds_.lookup += phases.lookup;
  seconds_.dense += phases.dense;
  seconds_.allreduce += phases.allreduce;
  seconds_.push += phases.push;
  seconds_.total += phases.total;
  bytes_sent_ += lookup_bytes_sent;
  bytes_received_ += lookup_bytes_received;
  last_examples_per_s_ = phases.total > 0 ? static_cast<double>(examples) / phases.total : 0.0;
  step_seconds_.Observe(phases.total);
}

void TrainerMetrics::RecordEvaluation(int64_t step, const nlohmann::json& eval) {
  std::lock_guard<std::mutex> lock(mu_);
  evaluated_ = true;
  eval_step_ = step;
  eval_examples_ = eval.value("examples", int64_t{0});
  eval_auc_ = eval.value("auc", 0.0);
  eval_log_loss_ = eval.value("log_loss", 0.0);
}

void TrainerMetrics::Write(PrometheusText* out, int rank) const {
  const MetricLabels r = {{"rank", std::to_string(rank)}};
  auto with = [&r](const char* key, const char* value) {
    MetricLabels l = r;
    l.emplace_back(key, value);
    return l;
  };
  std::lock_guard<std::mutex> lock(mu_);
  out->Counter("tessera_trainer_steps_total", "Steps this trainer process finished (replayed ones again).", r,
               static_cast<double>(steps_));
  out->Counter("tessera_trainer_examples_total", "Examples this trainer process trained on.", r,
               static_cast<double>(examples_));
  out->Gauge("tessera_trainer_step", "The last step finished (-1: none yet).", r, static_cast<double>(step_));
  out->Gauge("tessera_trainer_generation", "The job generation the last step ran in.", r,
             static_cast<double>(generation_));
  out->Gauge("tessera_trainer_epoch", "The epoch of the last step.", r, static_cast<double>(epoch_));
  out->Gauge("tessera_trainer_loss", "Mean loss of this trainer's share of the last step.", r, loss_);
  out->Gauge("tessera_trainer_examples_per_second", "This trainer's examples per second in the last step.", r,
             last_examples_per_s_);
  const char* help = "Time in each phase of the steps: data, lookup, dense, allreduce, push (summed over steps).";
  out->Counter("tessera_trainer_phase_seconds_total", help, with("phase", "data"), seconds_.data);
  out->Counter("tessera_trainer_phase_seconds_total", help, with("phase", "lookup"), seconds_.lookup);
  out->Counter("tessera_trainer_phase_seconds_total", help, with("phase", "dense"), seconds_.dense);
  out->Counter("tessera_trainer_phase_seconds_total", help, with("phase", "allreduce"), seconds_.allreduce);
  out->Counter("tessera_trainer_phase_seconds_total", help, with("phase", "push"), seconds_.push);
  step_seconds_.Write(out, "tessera_trainer_step_seconds", "Wall time of a whole step.", r);
  out->Counter("tessera_trainer_lookup_sent_bytes_total", "Bytes of lookup requests sent to the servers.", r,
               static_cast<double>(bytes_sent_));
  out->Counter("tessera_trainer_lookup_received_bytes_total", "Bytes of lookup replies received.", r,
               static_cast<double>(bytes_received_));
  if (evaluated_) {
    out->Gauge("tessera_trainer_eval_auc", "ROC AUC of the last evaluation.", r, eval_auc_);
    out->Gauge("tessera_trainer_eval_log_loss", "Mean log loss of the last evaluation.", r, eval_log_loss_);
    out->Gauge("tessera_trainer_eval_examples", "Examples in the last evaluation.", r,
               static_cast<double>(eval_examples_));
    out->Gauge("tessera_trainer_eval_step", "Steps trained when the last evaluation ran.", r,
               static_cast<double>(eval_step_));
  }
}

}  // namespace tessera
