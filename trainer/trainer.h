// Trainer: one C++ trainer process's life — join the job (TrainerMember:
// registration, heartbeats, generations), wire the data, the built-in model,
// the lookups and the collective, train, report.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/rpc_client.h"
#include "common/status.h"
#include "trainer/collective.h"
#include "trainer/embedding_client.h"
#include "trainer/trainer_member.h"
#include "trainer/trainer_metrics.h"

namespace tessera {

struct TrainerOptions {
  // Keys, the master, rank and world, and what ends the process when the
  // job is over for it (on_fatal: Run() returns that status as soon as its
  // thread is free; main() may end the process there instead, should that
  // thread be stuck with a dead peer).
  TrainerMemberOptions member;
  // Per-step metrics as JSON lines; "" writes none.
  std::string metrics_file;
  // Address the collective binds to and peers reach this trainer at.
  std::string host = "127.0.0.1";
  // BLAS threads for the dense layers. Several trainers often share a host.
  int blas_threads = 1;
  // Where the dense model computes: -1 the CPU (OpenBLAS, Gloo allreduce);
  // N >= 0 CUDA device N (cuBLAS, optimizer on the GPU, NCCL allreduce).
  // The embeddings travel the same way on both.
  int device = -1;
  // Fault injection for tests: the training thread stops at this step and
  // stays there (heartbeats go on): a stuck trainer. -1: never.
  int64_t test_stall_at_step = -1;
  // Fault injection for tests: at its Nth checkpoint barrier the trainer
  // arrives (its request sent), then calls crash_hook while the master
  // snapshots. 0 = never.
  int test_crash_in_checkpoint = 0;
  std::function<void()> crash_hook;
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Start(const TrainerOptions& options);
  // Why this build cannot train on a GPU (it lacks NCCL), or "" when it can.
  static std::string GpuPathMissing();
  ~Trainer();

  // Trains the job to its end and reports to the master.
  Status Run();

  // This trainer's figures for its metrics endpoint. Thread-safe.
  void WriteMetrics(PrometheusText* out) const;

 private:
  using GenerationStart = TrainerMember::GenerationStart;
  Trainer() = default;
  // Trains one generation: to the job's end (OK), or until it is replaced
  // (an error; the master's generation has moved on) or fails.
  Status Train(const GenerationStart& start, nlohmann::json* report);
  // Local for a world of one, NCCL between GPU trainers, Gloo between CPU ones.
  // NCCL where every trainer has a GPU of its own; otherwise Gloo, through
  // host memory (GPU trainers stage their gradients there).
  StatusOr<std::unique_ptr<Collective>> OpenCollective(const JobConfig& job);
  StatusOr<std::unique_ptr<Collective>> OpenGlooCollective(const JobConfig& job);
  // "" when NCCL can serve the job, else why not; agreed through the master.
  StatusOr<std::string> WhyNotNccl(const JobConfig& job);

  TrainerOptions options_;
  std::unique_ptr<TrainerMember> member_;
  std::unique_ptr<Store> store_;  // the master's store (MasterStore), where the collectives meet
  TrainerMetrics metrics_;
  int barriers_arrived_ = 0;  // checkpoint barriers, all generations (test_crash_in_checkpoint); training thread
};

}  // namespace tessera
