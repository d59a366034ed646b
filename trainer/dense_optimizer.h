// The optimizer of the replicated dense model: every trainer applies the same
// step to the same allreduced gradients, so the replicas stay identical.
// The arithmetic is the sparse optimizers' (kernels/sparse_optimizer_math.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"

namespace tessera {

class DenseOptimizer {
 public:
  // sgd, adagrad or adam (row-wise Adagrad is for embedding rows only).
  static StatusOr<DenseOptimizer> Create(const OptimizerSpec& spec, int64_t num_params);

  // params -= step(grads). REQUIRES: both have num_params elements.
  void Step(std::span<float> params, std::span<const float> grads);

  // Optimizer state, for checkpoints: [accumulators | m | v] as used, and
  // the steps taken (Adam's bias correction).
  std::span<const float> state() const { return state_; }
  int64_t steps() const { return steps_; }
  // Puts back what state() and steps() gave. Fails on a size mismatch.
  Status Restore(std::span<const float> state, int64_t steps);

 private:
  OptimizerSpec spec_;
  std::vector<float> state_;
  int64_t steps_ = 0;
};

}  // namespace tessera
