// The training loop of one trainer (DESIGN.md §4), given its wired parts:
//
//   read its share of global batch t -> sparse forward (lookups, context t)
//   -> dense forward/backward -> push embedding gradients (context t)
//   -> allreduce dense gradients -> dense step -> metrics line
//
// With allreduce buckets, the backward computes the inputs' gradients first,
// the push leaves, and the weights' gradients are allreduced in buckets as
// they are made.
//
// Gradients are those of the mean loss over the whole global batch (all
// trainers), so W trainers with batch B train exactly like one trainer with
// batch W*B (sync mode).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/status.h"
#include "trainer/collective.h"
#include "trainer/data_parallel_tables.h"
#include "trainer/data_source.h"
#include "trainer/dense_optimizer.h"
#include "trainer/dlrm_model.h"
#include "trainer/embedding_client.h"
#include "trainer/trainer_metrics.h"

namespace tessera {

struct TrainingLoopOptions {
  int rank = 0;
  int world = 1;
  // One JSON line per step; "" writes none.
  std::string metrics_file;
  // Append to metrics_file instead of starting it anew (a later generation
  // of the job: steps replayed after a rollback appear again), and the
  // generation each line is marked with.
  bool append_metrics = false;
  int64_t generation = 1;
  // Called every job.training.log_every steps (and at the last) with
  // {"step", "loss", "examples_per_s"}.
  std::function<void(const nlohmann::json&)> on_progress;
  // Set by another thread to stop between steps.
  const std::atomic<bool>* stop = nullptr;
  // Counts every step finished (for the master's stall watchdog).
  std::atomic<int64_t>* steps_done = nullptr;
  // Held-out evaluation while training (trainer 0): after every
  // eval_every-th step but the last (which the trainer evaluates anyway),
  // Evaluate(eval_data) runs and its figures go to the metrics file as a
  // line {"step", "eval": {examples, log_loss, auc}} and to step_metrics.
  // 0 or no eval_data: none.
  DataSource* eval_data = nullptr;
  int64_t eval_every = 0;
  // Figures of every step for the metrics endpoint; may be null.
  TrainerMetrics* step_metrics = nullptr;
  // Called before each step; fault injection for tests (a stuck trainer).
  std::function<void(int64_t step)> before_step;

  // training.allreduce_bucket_bytes: > 0 sums the dense gradients over the
  // trainers in buckets of this many bytes, each as soon as the backward
  // pass has it (trainer/bucketed_allreduce.h), and the embedding gradients
  // leave before the dense weights' gradients are computed. 0: one
  // allreduce after the backward pass. A model on a GPU always sums in one.
  int64_t allreduce_bucket_bytes = 0;

  // The first step (a resumed job starts where its checkpoint was taken).
  int64_t start_step = 0;
  // Checkpoints: the loop stops at a step boundary s and calls barrier(s)
  // when s is a multiple of checkpoint_every (s > start_step), or when s is
  // a multiple of request_check_every and any trainer had
  // *checkpoint_requested (set from the master's heartbeat replies) at step
  // s-1 (agreed by a one-float allreduce; only every request_check_every
  // steps, as that allreduce costs a round trip among the trainers). barrier
  // returns once the checkpoint is taken.
  int64_t checkpoint_every = 0;
  int64_t request_check_every = 16;
  const std::atomic<bool>* checkpoint_requested = nullptr;
  std::function<Status(int64_t step)> barrier;
};

struct TrainingResult {
  int64_t steps = 0;
  int64_t examples = 0;
  double final_loss = 0;       // mean over the last log window
  double examples_per_s = 0;   // this trainer's, after the first steps' warm-up
  double wall_s = 0;
};

class TrainingLoop {
 public:
  TrainingLoop(const JobConfig& job, const TrainingLoopOptions& options, DataSource* data, EmbeddingClient* embeddings,
               DataParallelTables* local_tables, Collective* collective, DlrmModel* model, DenseOptimizer* optimizer);

  // Steps in the job: training.steps, or epochs x steps per epoch.
  int64_t TotalSteps() const;

  StatusOr<TrainingResult> Run();

  // Log loss and AUC of the model on `data` (inference lookups at `step`,
  // which in sync mode waits until every step before it is applied).
  StatusOr<nlohmann::json> Evaluate(DataSource* data, uint64_t step);

 private:
  // Features of all tables, in model order: remote ones from the servers,
  // data-parallel ones from the local tables. Unpooled (sequence) features
  // come back one row per id and are summed per bag here before the dense
  // layers (a sequence model would take the rows as they are).
  Status LookupAll(uint64_t step, const KeyedJaggedTensor& kjt, bool inference, FeatureOutputs* features,
                   std::vector<const float*>* pooled);
  // The rest of LookupAll once the servers' rows are in `features`.
  Status CompleteLookup(const KeyedJaggedTensor& kjt, FeatureOutputs* features, std::vector<const float*>* pooled);
  // d(pooled) -> d(output rows) for the unpooled features.
  void ExpandSequenceGrads(const KeyedJaggedTensor& kjt, FeatureOutputs* grads);
  // Whether every trainer stops at the next step for a checkpoint on demand.
  Status AgreeOnCheckpoint(bool* agreed);

  JobConfig job_;
  TrainingLoopOptions options_;
  DataSource* data_;
  EmbeddingClient* embeddings_;
  DataParallelTables* local_tables_;
  std::vector<int> dims_;
  std::vector<bool> unpooled_;
  FeatureOutputs sequence_pooled_;
  Collective* collective_;
  DlrmModel* model_;
  DenseOptimizer* optimizer_;
};

}  // namespace tessera
