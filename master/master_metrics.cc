// Master::WriteMetrics: the job's figures for the master's metrics endpoint.
#include <string>

#include "master/master.h"

namespace tessera {

void Master::WriteMetrics(PrometheusText* out) const {
  server_->WriteMetrics(out, {{"role", "master"}});
  std::lock_guard<std::mutex> lock(mu_);
  const char* states[] = {"waiting", "starting", "running", "recovering", "done", "aborted"};
  const int current = static_cast<int>(state_);
  for (int i = 0; i < 6; ++i) {
    out->Gauge("tessera_job_state", "1 for the job's current state.", {{"state", states[i]}}, i == current ? 1 : 0);
  }
  out->Gauge("tessera_job_generation", "The job's generation (one more after each rollback or change of servers).",
             {}, static_cast<double>(generation_));
  out->Gauge("tessera_job_plan_version", "The sharding plan's version (0 before the start).", {},
             plan_ ? static_cast<double>(plan_->version) : 0.0);
  int ready = 0, leaving = 0;
  for (const auto& [id, ps] : ps_) {
    ready += ps.ready;
    leaving += ps.leaving;
  }
  out->Gauge("tessera_job_servers", "Parameter servers registered with the master.", {{"status", "registered"}},
             static_cast<double>(ps_.size()));
  out->Gauge("tessera_job_servers", "Parameter servers registered with the master.", {{"status", "ready"}}, ready);
  out->Gauge("tessera_job_servers", "Parameter servers registered with the master.", {{"status", "leaving"}},
             leaving);
  int trainers = 0, done = 0;
  for (const auto& t : trainers_) {
    trainers += t.has_value();
    done += t.has_value() && t->done;
  }
  out->Gauge("tessera_job_trainers", "Trainers registered with the master.", {{"status", "registered"}}, trainers);
  out->Gauge("tessera_job_trainers", "Trainers registered with the master.", {{"status", "done"}}, done);
  if (shown_.any) {
    out->Gauge("tessera_job_step", "The last step every trainer reported.", {}, static_cast<double>(shown_.step));
    out->Gauge("tessera_job_steps", "The steps the job trains in all.", {}, static_cast<double>(shown_.total));
    out->Gauge("tessera_job_epoch", "The epoch of the last reported step.", {}, static_cast<double>(shown_.epoch));
    out->Gauge("tessera_job_loss", "Mean loss over every trainer's last reporting window.", {}, shown_.loss);
    out->Gauge("tessera_job_examples_per_second", "Examples per second of all trainers, last reporting window.", {},
               shown_.examples_per_s);
  }
  out->Counter("tessera_job_checkpoints_total", "Checkpoints taken by this master.", {},
               static_cast<double>(checkpoints_.size()));
  if (!checkpoints_.empty()) {
    const auto& last = checkpoints_.back();
    out->Gauge("tessera_job_last_checkpoint_step", "Step of the last checkpoint.", {}, last.value("step", 0.0));
    out->Gauge("tessera_job_last_checkpoint_seconds", "How long the last checkpoint paused the job.", {},
               last.value("seconds", 0.0));
    out->Gauge("tessera_job_last_checkpoint_bytes", "Bytes the last checkpoint wrote.", {}, last.value("bytes", 0.0));
  }
  out->Counter("tessera_job_checkpoint_failures_total",
               "Checkpoints that failed while every member lived (the job went on without them).", {},
               static_cast<double>(failed_checkpoints_.size()));
  out->Counter("tessera_job_recoveries_total", "Rollbacks and promotions after a lost member.", {}, recoveries_);
  out->Counter("tessera_job_migrations_total", "Changes of servers that moved rows while the job ran.", {},
               static_cast<double>(migration_stats_.size()));
  for (const auto& t : trainers_) {
    if (!t || !t->report.contains("eval")) continue;
    const auto& eval = t->report["eval"];
    out->Gauge("tessera_job_eval_auc", "ROC AUC of the job's evaluation.", {}, eval.value("auc", 0.0));
    out->Gauge("tessera_job_eval_log_loss", "Mean log loss of the job's evaluation.", {}, eval.value("log_loss", 0.0));
  }
}

}  // namespace tessera
