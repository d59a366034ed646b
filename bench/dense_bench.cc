// tessera_dense_bench: the dense-only limit of a job's trainer. The job's
// DLRM dense model (trainer/dlrm_model.h) alone, on the CPU with the
// trainer's one BLAS thread: forward, backward and the dense optimizer's
// step over batch_size random examples, step after step, with no lookups,
// pushes, data or allreduce. Its examples/s is what a trainer could reach if
// everything but the MLP cost nothing; bench/e2e_bench.sh runs one per
// trainer side by side (they share the cores as the trainers do) and sets
// the job's examples/s against their sum (issue 15: at least 70% of it).
//
//   tessera_dense_bench --config bench/configs/w1.json [--seconds 10] [--warmup_steps 20]
//   tessera_dense_bench --print_blas_core   (the OpenBLAS kernels it and the trainers run on)
//
// Prints one JSON line: {"examples_per_s", "steps", "batch", "ms_per_step",
// "blas_core" (the OpenBLAS kernels it ran on), ...}.
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "common/job_config.h"
#include "kernels/blas_core.h"
#include "kernels/dense_ops.h"
#include "trainer/dense_optimizer.h"
#include "trainer/dlrm_model.h"

DEFINE_string(config, "", "the job's config (its model, tables, batch_size and dense optimizer)");
DEFINE_double(seconds, 10.0, "how long to time steps for, after the warm-up");
DEFINE_int32(warmup_steps, 20, "untimed steps first");
DEFINE_int32(blas_threads, 1, "BLAS threads (the trainer's default: 1)");
DEFINE_bool(print_blas_core, false, "print the OpenBLAS core this machine's trainers run on, and exit");

namespace tessera {
namespace {

int Main() {
  auto job = LoadJobConfig(FLAGS_config);
  if (!job.ok()) {
    std::cerr << "tessera_dense_bench: " << job.status() << "\n";
    return 1;
  }
  kernels::SetBlasThreads(FLAGS_blas_threads);
  std::vector<int> dims;
  for (const TableConfig& t : job->tables) dims.insert(dims.end(), t.feature_names.size(), t.embedding_dim);
  DlrmModel model(job->model, dims, job->training.seed);
  auto optimizer = DenseOptimizer::Create(job->training.dense_optimizer, model.num_params());
  if (!optimizer.ok()) {
    std::cerr << "tessera_dense_bench: " << optimizer.status() << "\n";
    return 1;
  }
  // Random inputs of the trainer's shapes; their values do not change the
  // arithmetic's cost.
  const int64_t batch = job->training.batch_size;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> dense(batch * job->model.num_dense_features), labels(batch);
  for (float& x : dense) x = normal(rng);
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(rng() % 2);
  std::vector<std::vector<float>> features(dims.size());
  std::vector<const float*> feature_ptrs;
  for (size_t f = 0; f < dims.size(); ++f) {
    features[f].resize(batch * dims[f]);
    for (float& x : features[f]) x = 0.1f * normal(rng);
    feature_ptrs.push_back(features[f].data());
  }
  std::vector<std::vector<float>> d_features;
  const float scale = 1.0f / static_cast<float>(batch);
  auto step = [&]() -> Status {
    auto loss = model.ForwardBackward(dense.data(), feature_ptrs, labels.data(), batch, scale, &d_features);
    if (!loss.ok()) return loss.status();
    return optimizer->Step(model.params(), model.grads());
  };
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < FLAGS_warmup_steps; ++i) {
    Status st = step();
    if (!st.ok()) {
      std::cerr << "tessera_dense_bench: " << st << "\n";
      return 1;
    }
  }
  const auto start = Clock::now();
  int64_t steps = 0;
  double elapsed = 0;
  while (elapsed < FLAGS_seconds) {
    Status st = step();
    if (!st.ok()) {
      std::cerr << "tessera_dense_bench: " << st << "\n";
      return 1;
    }
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::printf("{\"bench\":\"dense_only\",\"config\":\"%s\",\"batch\":%ld,\"params\":%ld,\"steps\":%ld,"
              "\"ms_per_step\":%.4f,\"examples_per_s\":%.1f,\"blas_core\":\"%s\"}\n",
              FLAGS_config.c_str(), static_cast<long>(batch), static_cast<long>(model.num_params()),
              static_cast<long>(steps), elapsed * 1e3 / steps, steps * batch / elapsed,
              kernels::BlasCoreName().c_str());
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  // As the trainer does: the same kernels as the trainers it is set against.
  const std::string blas_note = tessera::kernels::RunOnBetterBlasCore(argv);
  if (!blas_note.empty()) std::cerr << "tessera_dense_bench: " << blas_note << "\n";
  gflags::SetUsageMessage("tessera_dense_bench --config JOB.json [--seconds S]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_print_blas_core) {
    std::printf("%s\n", tessera::kernels::BlasCoreName().c_str());
    return 0;
  }
  if (FLAGS_config.empty()) {
    std::cerr << "tessera_dense_bench: --config is required\n";
    return 2;
  }
  return tessera::Main();
}
