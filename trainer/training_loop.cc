#include "trainer/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <glog/logging.h>

#include "trainer/bucketed_allreduce.h"
#include "trainer/data_split.h"
#include "trainer/eval_metrics.h"

namespace tessera {

using Clock = std::chrono::steady_clock;

namespace {
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

TrainingLoop::TrainingLoop(const JobConfig& job, const TrainingLoopOptions& options, DataSource* data,
                           EmbeddingClient* embeddings, DataParallelTables* local_tables, Collective* collective,
                           DlrmModel* model, DenseOptimizer* optimizer)
    : job_(job),
      options_(options),
      data_(data),
      embeddings_(embeddings),
      local_tables_(local_tables),
      collective_(collective),
      model_(model),
      optimizer_(optimizer) {
  for (const TableConfig& t : job.tables) {
    for (size_t i = 0; i < t.feature_names.size(); ++i) {
      dims_.push_back(t.embedding_dim);
      unpooled_.push_back(t.pooling == PoolingType::kNone);
    }
  }
}

Status TrainingLoop::LookupAll(uint64_t step, const KeyedJaggedTensor& kjt, bool inference, FeatureOutputs* features,
                               std::vector<const float*>* pooled) {
  TESSERA_RETURN_IF_ERROR(embeddings_->Lookup(step, kjt, inference, features));
  return CompleteLookup(kjt, features, pooled);
}

Status TrainingLoop::CompleteLookup(const KeyedJaggedTensor& kjt, FeatureOutputs* features,
                                    std::vector<const float*>* pooled) {
  TESSERA_RETURN_IF_ERROR(local_tables_->Lookup(kjt, features));
  const auto& names = embeddings_->features();
  sequence_pooled_.resize(names.size());
  pooled->assign(names.size(), nullptr);
  for (size_t f = 0; f < names.size(); ++f) {
    if (!unpooled_[f]) {
      (*pooled)[f] = (*features)[f].data();
      continue;
    }
    const int dim = dims_[f];
    auto lens = kjt.FeatureLengths(kjt.KeyIndex(names[f]));
    std::vector<float>& out = sequence_pooled_[f];
    out.assign(kjt.batch_size * dim, 0.0f);
    const float* row = (*features)[f].data();
    for (int64_t b = 0; b < kjt.batch_size; ++b) {
      for (int32_t k = 0; k < lens[b]; ++k, row += dim) {
        for (int c = 0; c < dim; ++c) out[b * dim + c] += row[c];
      }
    }
    (*pooled)[f] = out.data();
  }
  return Status::OK();
}

void TrainingLoop::ExpandSequenceGrads(const KeyedJaggedTensor& kjt, FeatureOutputs* grads) {
  const auto& names = embeddings_->features();
  for (size_t f = 0; f < names.size(); ++f) {
    if (!unpooled_[f]) continue;
    const int dim = dims_[f];
    auto lens = kjt.FeatureLengths(kjt.KeyIndex(names[f]));
    std::vector<float> rows;
    for (int64_t b = 0; b < kjt.batch_size; ++b) {
      for (int32_t k = 0; k < lens[b]; ++k) {
        rows.insert(rows.end(), (*grads)[f].begin() + b * dim, (*grads)[f].begin() + (b + 1) * dim);
      }
    }
    (*grads)[f] = std::move(rows);
  }
}

int64_t TrainingLoop::TotalSteps() const {
  if (job_.training.steps > 0) return job_.training.steps;
  return job_.training.epochs *
         StepsPerEpoch(options_.world, job_.training.batch_size, data_->num_examples());
}

// A request on demand reaches each trainer's heartbeat at a different
// moment, but trainers move in lockstep (the allreduce): one that stopped at a
// boundary alone would wait forever for the others, stuck in the next
// allreduce. So they stop only where all agree, and agree here, where they
// meet anyway: any trainer that has seen the request carries all of them to
// the barrier at the next step.
Status TrainingLoop::AgreeOnCheckpoint(bool* agreed) {
  *agreed = false;
  if (!options_.barrier || options_.checkpoint_requested == nullptr) return Status::OK();
  float seen = options_.checkpoint_requested->load() ? 1.0f : 0.0f;
  TESSERA_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<float>(&seen, 1)));
  *agreed = seen > 0.0f;
  return Status::OK();
}

StatusOr<TrainingResult> TrainingLoop::Run() {
  std::ofstream metrics;
  if (!options_.metrics_file.empty()) {
    metrics.open(options_.metrics_file, options_.append_metrics ? std::ios::app : std::ios::trunc);
    if (!metrics) return Status::Unavailable("cannot write metrics file " + options_.metrics_file);
  }
  const int64_t total = TotalSteps();
  // The first steps warm caches and connections; throughput counts after them.
  const int64_t warmup = std::min<int64_t>((total - options_.start_step) / 10, 20);
  const int64_t B = job_.training.batch_size;
  const bool prefetch = job_.training.prefetch;
  Batch batch, next_batch;  // next_batch: the prefetched step's, with prefetch
  FeatureOutputs features, d_features;
  std::vector<const float*> pooled;
  TrainingResult result;
  double window_loss = 0;
  int64_t window_examples = 0;
  double previous_loss = 0;  // the last step's mean over its examples
  Clock::time_point window_start = Clock::now(), run_start = window_start, timed_start = window_start;
  int64_t timed_examples = 0;

  bool agreed_checkpoint = false;  // decided by all trainers together at the previous step
  // After this step an evaluation runs (its lookups share the client, so no
  // prefetched lookup may be in flight then).
  auto evaluates_after = [&](int64_t step) {
    return options_.eval_data != nullptr && options_.eval_every > 0 && (step + 1) % options_.eval_every == 0 &&
           step + 1 < total;
  };
  bool prefetched = false;  // this step's batch was read and its lookup started during the last step
  std::unique_ptr<BucketedAllReduce> buckets;
  if (!model_->on_device() && options_.allreduce_bucket_bytes > 0) {
    buckets = std::make_unique<BucketedAllReduce>(
        collective_, std::max<int64_t>(1, options_.allreduce_bucket_bytes / static_cast<int64_t>(sizeof(float))));
  }
  for (int64_t step = options_.start_step; step < total; ++step) {
    if (options_.stop != nullptr && options_.stop->load()) return Status::Cancelled("training stopped");
    if (options_.before_step) options_.before_step(step);
    if (options_.barrier) {
      const bool periodic = options_.checkpoint_every > 0 && step > options_.start_step &&
                            step % options_.checkpoint_every == 0;
      if (periodic || agreed_checkpoint) {
        agreed_checkpoint = false;
        TESSERA_RETURN_IF_ERROR(options_.barrier(step));
      }
    }
    if (step == options_.start_step + warmup) {
      timed_start = Clock::now();
      timed_examples = 0;
    }
    const auto t0 = Clock::now();
    const StepShare share = ShareOfStep(step, options_.rank, options_.world, B, data_->num_examples());
    if (!prefetched) {
      TESSERA_RETURN_IF_ERROR(data_->Read(share.begin, share.count, &batch));
    }
    const auto t1 = Clock::now();
    if (prefetch) {
      if (!prefetched) {
        TESSERA_RETURN_IF_ERROR(embeddings_->StartLookup(static_cast<uint64_t>(step), batch.sparse, false));
      }
      TESSERA_RETURN_IF_ERROR(embeddings_->FinishLookup(&features));
      // The next step's lookups travel while this one computes.
      prefetched = step + 1 < total && !evaluates_after(step);
      if (prefetched) {
        const StepShare next = ShareOfStep(step + 1, options_.rank, options_.world, B, data_->num_examples());
        TESSERA_RETURN_IF_ERROR(data_->Read(next.begin, next.count, &next_batch));
        TESSERA_RETURN_IF_ERROR(embeddings_->StartLookup(static_cast<uint64_t>(step + 1), next_batch.sparse, false));
      }
      TESSERA_RETURN_IF_ERROR(CompleteLookup(batch.sparse, &features, &pooled));
    } else {
      TESSERA_RETURN_IF_ERROR(LookupAll(static_cast<uint64_t>(step), batch.sparse, false, &features, &pooled));
    }
    const auto t2 = Clock::now();
    Clock::time_point t3;
    // The embedding gradients travel while the dense ones are computed and
    // allreduced.
    auto send_features = [&]() -> Status {
      ExpandSequenceGrads(batch.sparse, &d_features);
      TESSERA_RETURN_IF_ERROR(embeddings_->StartPush(d_features));
      return local_tables_->Backward(batch.sparse, d_features);
    };
    const float loss_scale = 1.0f / static_cast<float>(share.global_count);
    double loss_sum = 0;
    if (buckets != nullptr) {
      buckets->Begin(model_->grads());
      DlrmModel::BackwardHooks hooks;
      hooks.features_ready = send_features;
      hooks.grads_ready = [&](int64_t offset, int64_t count) {
        buckets->Ready(offset, count);
        return Status::OK();
      };
      StatusOr<double> fb = model_->ForwardBackward(batch.dense.data(), pooled, batch.labels.data(), batch.size,
                                                    loss_scale, &d_features, &hooks);
      t3 = Clock::now();
      // Waited for even when the backward failed: the buckets in flight read
      // the model's gradients.
      const Status summed = buckets->Finish();
      TESSERA_RETURN_IF_ERROR(fb.status());
      TESSERA_RETURN_IF_ERROR(summed);
      loss_sum = *fb;
    } else if (!model_->on_device()) {
      // The push leaves once the features' gradients are final, before the
      // weights' are computed: the servers apply it meanwhile.
      DlrmModel::BackwardHooks hooks;
      hooks.features_ready = send_features;
      TESSERA_ASSIGN_OR_RETURN(loss_sum, model_->ForwardBackward(batch.dense.data(), pooled, batch.labels.data(),
                                                                 batch.size, loss_scale, &d_features, &hooks));
      t3 = Clock::now();
      TESSERA_RETURN_IF_ERROR(collective_->AllReduceSum(model_->grads()));
    } else {
      TESSERA_ASSIGN_OR_RETURN(loss_sum, model_->ForwardBackward(batch.dense.data(), pooled, batch.labels.data(),
                                                                 batch.size, loss_scale, &d_features));
      t3 = Clock::now();
      TESSERA_RETURN_IF_ERROR(send_features());
      // On a GPU the gradients are summed where they are, in device memory.
      TESSERA_RETURN_IF_ERROR(collective_->AllReduceSumDevice(model_->grads().data(), model_->num_params()));
    }
    if (!std::isfinite(loss_sum)) {
      // Its gradients are NaN too, and the servers would refuse them
      // ("non-finite gradient in push"), which says nothing of why.
      auto format = [](double v) {
        char text[32];
        std::snprintf(text, sizeof(text), "%.4g", v);
        return std::string(text);
      };
      std::string earlier;
      if (step > options_.start_step) {
        earlier = " (step " + std::to_string(step - 1) + "'s: " + format(previous_loss) + ")";
      }
      return Status::Aborted("training diverged: the loss of step " + std::to_string(step) + " is " +
                             format(loss_sum) + earlier +
                             ": learning rates too high (training.dense_optimizer.lr, the tables' optimizer.lr), "
                             "or inputs that are not finite");
    }
    // Every trainer asks at the same steps, so all agree on the boundary.
    if ((step + 1) % std::max<int64_t>(1, options_.request_check_every) == 0) {
      TESSERA_RETURN_IF_ERROR(AgreeOnCheckpoint(&agreed_checkpoint));
    }
    TESSERA_RETURN_IF_ERROR(local_tables_->Step(collective_));
    TESSERA_RETURN_IF_ERROR(optimizer_->Step(model_->params(), model_->grads()));
    const auto t4 = Clock::now();
    TESSERA_RETURN_IF_ERROR(embeddings_->WaitPush());
    const auto t5 = Clock::now();

    const double step_s = Seconds(t0, t5);
    const double loss = batch.size > 0 ? loss_sum / static_cast<double>(batch.size) : 0.0;
    previous_loss = loss;
    window_loss += loss_sum;
    window_examples += batch.size;
    timed_examples += batch.size;
    result.examples += batch.size;
    if (options_.step_metrics != nullptr) {
      StepPhases phases;
      phases.data = Seconds(t0, t1);
      phases.lookup = Seconds(t1, t2);
      phases.dense = Seconds(t2, t3);
      phases.allreduce = Seconds(t3, t4);
      phases.push = Seconds(t4, t5);
      phases.total = step_s;
      options_.step_metrics->RecordStep(step, options_.generation, share.epoch, loss, batch.size, phases,
                                        embeddings_->last_lookup_bytes(), embeddings_->last_reply_bytes());
    }
    if (metrics.is_open()) {
      nlohmann::json line = {{"step", step},
                             {"generation", options_.generation},
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
                             {"lookup_bytes_sent", embeddings_->last_lookup_bytes()},
                             {"lookup_bytes_received", embeddings_->last_reply_bytes()}};
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
                              {"epoch", share.epoch},
                              {"loss", window_mean},
                              {"examples", window_examples},
                              {"examples_per_s", window_s > 0 ? window_examples / window_s : 0.0}});
      }
      window_loss = 0;
      window_examples = 0;
      window_start = now;
    }
    result.steps = step + 1;
    if (options_.steps_done != nullptr) ++*options_.steps_done;
    if (prefetched) std::swap(batch, next_batch);
    if (evaluates_after(step)) {
      TESSERA_ASSIGN_OR_RETURN(nlohmann::json eval, Evaluate(options_.eval_data, static_cast<uint64_t>(step + 1)));
      LOG(INFO) << "trainer " << options_.rank << ": eval after step " << step + 1 << " " << eval.dump();
      if (options_.step_metrics != nullptr) options_.step_metrics->RecordEvaluation(step + 1, eval);
      if (metrics.is_open()) metrics << nlohmann::json{{"step", step}, {"eval", eval}}.dump() << '\n';
    }
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
  std::vector<const float*> pooled;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    TESSERA_RETURN_IF_ERROR(data->Read(begin, count, &batch));
    TESSERA_RETURN_IF_ERROR(LookupAll(step, batch.sparse, /*inference=*/true, &features, &pooled));
    TESSERA_RETURN_IF_ERROR(model_->Predict(batch.dense.data(), pooled, count, logits.data() + begin));
    std::copy(batch.labels.begin(), batch.labels.end(), labels.begin() + begin);
  }
  return nlohmann::json{{"examples", n}, {"log_loss", MeanLogLoss(logits, labels)}, {"auc", RocAuc(logits, labels)}};
}

}  // namespace tessera
