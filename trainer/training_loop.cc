#include "trainer/training_loop.h"

#include <chrono>
#include <fstream>

#include <glog/logging.h>

#include "trainer/data_split.h"
#include "trainer/eval_metrics.h"

namespace tessera {

using Clock = std::chrono::steady_clock;

namespace {
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<const float*> Pointers(const FeatureOutputs& outputs) {
  std::vector<const float*> p;
  for (const auto& o : outputs) p.push_back(o.data());
  return p;
}
}  // namespace

TrainingLoop::TrainingLoop(const JobConfig& job, const TrainingLoopOptions& options, DataSource* data,
                           EmbeddingClient* embeddings, Collective* collective, DlrmModel* model,
                           DenseOptimizer* optimizer)
    : job_(job),
      options_(options),
      data_(data),
      embeddings_(embeddings),
      collective_(collective),
      model_(model),
      optimizer_(optimizer) {}

int64_t TrainingLoop::TotalSteps() const {
  if (job_.training.steps > 0) return job_.training.steps;
  return job_.training.epochs *
         StepsPerEpoch(options_.world, job_.training.batch_size, data_->num_examples());
}

StatusOr<TrainingResult> TrainingLoop::Run() {
  std::ofstream metrics;
  if (!options_.metrics_file.empty()) {
    metrics.open(options_.metrics_file, std::ios::trunc);
    if (!metrics) return Status::Unavailable("cannot write metrics file " + options_.metrics_file);
  }
  const int64_t total = TotalSteps();
  // The first steps warm caches and connections; throughput counts after them.
  const int64_t warmup = std::min<int64_t>(total / 10, 20);
  const int64_t B = job_.training.batch_size;
  Batch batch;
  FeatureOutputs features, d_features;
  TrainingResult result;
  double window_loss = 0;
  int64_t window_examples = 0;
  Clock::time_point window_start = Clock::now(), run_start = window_start, timed_start = window_start;
  int64_t timed_examples = 0;

  for (int64_t step = 0; step < total; ++step) {
    if (options_.stop != nullptr && options_.stop->load()) return Status::Cancelled("training stopped");
    if (step == warmup) {
      timed_start = Clock::now();
      timed_examples = 0;
    }
    const auto t0 = Clock::now();
    const StepShare share = ShareOfStep(step, options_.rank, options_.world, B, data_->num_examples());
    TESSERA_RETURN_IF_ERROR(data_->Read(share.begin, share.count, &batch));
    const auto t1 = Clock::now();
    TESSERA_RETURN_IF_ERROR(embeddings_->Lookup(static_cast<uint64_t>(step), batch.sparse, false, &features));
    const auto t2 = Clock::now();
    const double loss_sum =
        model_->ForwardBackward(batch.dense.data(), Pointers(features), batch.labels.data(), batch.size,
                                1.0f / static_cast<float>(share.global_count), &d_features);
    const auto t3 = Clock::now();
    // The embedding gradients travel while the dense ones are allreduced.
    TESSERA_RETURN_IF_ERROR(embeddings_->StartPush(d_features));
    TESSERA_RETURN_IF_ERROR(collective_->AllReduceSum(model_->grads()));
    optimizer_->Step(model_->params(), model_->grads());
    const auto t4 = Clock::now();
    TESSERA_RETURN_IF_ERROR(embeddings_->WaitPush());
    const auto t5 = Clock::now();

    const double step_s = Seconds(t0, t5);
    const double loss = batch.size > 0 ? loss_sum / static_cast<double>(batch.size) : 0.0;
    window_loss += loss_sum;
    window_examples += batch.size;
    timed_examples += batch.size;
    result.examples += batch.size;
    if (metrics.is_open()) {
      nlohmann::json line = {{"step", step},
                             {"epoch", share.epoch},
                             {"loss", loss},
                             {"examples", batch.size},
                             {"examples_per_s", step_s > 0 ? batch.size / step_s : 0.0},
                             {"step_ms", step_s * 1e3},
                             {"data_ms", Seconds(t0, t1) * 1e3},
                             {"lookup_ms", Seconds(t1, t2) * 1e3},
                             {"dense_ms", Seconds(t2, t3) * 1e3},
                             {"allreduce_ms", Seconds(t3, t4) * 1e3},
                             {"push_ms", Seconds(t4, t5) * 1e3},
                             {"lookup_bytes", embeddings_->last_lookup_bytes()}};
      metrics << line.dump() << '\n';
    }
    const bool last = step + 1 == total;
    if ((step + 1) % job_.training.log_every == 0 || last) {
      const auto now = Clock::now();
      const double window_s = Seconds(window_start, now);
      const double window_mean = window_examples > 0 ? window_loss / static_cast<double>(window_examples) : 0.0;
      // A trainer whose share of the last, short batch is empty keeps the
      // loss of its last window that had examples.
      if (window_examples > 0) result.final_loss = window_mean;
      if (options_.on_progress) {
        options_.on_progress({{"step", step + 1},
                              {"loss", window_mean},
                              {"examples", window_examples},
                              {"examples_per_s", window_s > 0 ? window_examples / window_s : 0.0}});
      }
      window_loss = 0;
      window_examples = 0;
      window_start = now;
    }
    result.steps = step + 1;
  }
  const auto end = Clock::now();
  result.wall_s = Seconds(run_start, end);
  const double timed_s = Seconds(timed_start, end);
  result.examples_per_s = timed_s > 0 ? static_cast<double>(timed_examples) / timed_s : 0.0;
  if (metrics.is_open()) metrics.flush();
  return result;
}

StatusOr<nlohmann::json> TrainingLoop::Evaluate(DataSource* data, uint64_t step) {
  const int64_t n = data->num_examples();
  const int64_t chunk = 4096;
  std::vector<float> logits(n), labels(n);
  Batch batch;
  FeatureOutputs features;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    TESSERA_RETURN_IF_ERROR(data->Read(begin, count, &batch));
    TESSERA_RETURN_IF_ERROR(embeddings_->Lookup(step, batch.sparse, /*inference=*/true, &features));
    model_->Predict(batch.dense.data(), Pointers(features), count, logits.data() + begin);
    std::copy(batch.labels.begin(), batch.labels.end(), labels.begin() + begin);
  }
  return nlohmann::json{{"examples", n}, {"log_loss", MeanLogLoss(logits, labels)}, {"auc", RocAuc(logits, labels)}};
}

}  // namespace tessera
