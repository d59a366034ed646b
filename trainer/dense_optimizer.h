// The optimizer of the replicated dense model: every trainer applies the same
// step to the same allreduced gradients, so the replicas stay identical.
// The arithmetic is kernels/dense_optimizer_math.h (the sparse optimizers'
// per-element formulas), run by a DenseBackend on its memory: the state
// lives where the parameters do, on the host or on the GPU. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"
#include "trainer/dense_backend.h"

namespace tessera {

class DenseOptimizer {
 public:
  // sgd, adagrad or adam (row-wise Adagrad is for embedding rows only).
  // The state is in `backend`'s memory, which must outlive the optimizer;
  // null: host memory, on a CPU backend of its own.
  static StatusOr<DenseOptimizer> Create(const OptimizerSpec& spec, int64_t num_params,
                                         DenseBackend* backend = nullptr);

  // params -= step(grads), both in the backend's memory. On a device the step
  // has finished when it returns. REQUIRES: both have num_params elements.
  Status Step(std::span<float> params, std::span<const float> grads);

  // Optimizer state, for checkpoints: [accumulators | m | v] as used (the
  // same layout on every backend), and the steps taken (Adam's bias
  // correction).
  StatusOr<std::vector<float>> CopyStateToHost() const;
  int64_t steps() const { return steps_; }
  // Puts back what CopyStateToHost() and steps() gave. Fails on a size mismatch.
  Status Restore(std::span<const float> state, int64_t steps);

 private:
  OptimizerSpec spec_;
  kernels::DenseOptimizerKind kind_ = kernels::DenseOptimizerKind::kSgd;
  int64_t num_params_ = 0;
  std::unique_ptr<DenseBackend> owned_backend_;
  DenseBackend* backend_ = nullptr;
  std::unique_ptr<DenseArray> state_;
  int64_t steps_ = 0;
};

}  // namespace tessera
