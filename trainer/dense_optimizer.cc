#include "trainer/dense_optimizer.h"

#include <glog/logging.h>

#include "kernels/sparse_optimizer_math.h"

namespace tessera {

StatusOr<DenseOptimizer> DenseOptimizer::Create(const OptimizerSpec& spec, int64_t num_params) {
  DenseOptimizer o;
  o.spec_ = spec;
  if (spec.type == "sgd") {
  } else if (spec.type == "adagrad") {
    o.state_.assign(num_params, static_cast<float>(spec.initial_accumulator));
  } else if (spec.type == "adam") {
    o.state_.assign(2 * num_params, 0.0f);
  } else {
    return Status::InvalidArgument("training.dense_optimizer: '" + spec.type +
                                   "' is not a dense optimizer (use sgd, adagrad or adam)");
  }
  return o;
}

void DenseOptimizer::Step(std::span<float> params, std::span<const float> grads) {
  CHECK_EQ(params.size(), grads.size());
  const float lr = static_cast<float>(spec_.lr), eps = static_cast<float>(spec_.eps);
  const float wd = static_cast<float>(spec_.weight_decay);
  const size_t n = params.size();
  ++steps_;
  if (spec_.type == "sgd") {
    for (size_t i = 0; i < n; ++i) {
      params[i] = kernels::SgdStep(params[i], kernels::WeightDecayGrad(grads[i], params[i], wd), lr);
    }
  } else if (spec_.type == "adagrad") {
    for (size_t i = 0; i < n; ++i) {
      const float g = kernels::WeightDecayGrad(grads[i], params[i], wd);
      state_[i] = kernels::AdagradAccumulate(state_[i], g);
      params[i] = kernels::AdagradStep(params[i], g, state_[i], lr, eps);
    }
  } else {
    const float b1 = static_cast<float>(spec_.beta1), b2 = static_cast<float>(spec_.beta2);
    const float step = static_cast<float>(steps_);
    const float step_size = kernels::AdamStepSize(lr, b1, step);
    const float sqrt_bc2 = kernels::AdamSqrtBiasCorrection2(b2, step);
    float* m = state_.data();
    float* v = state_.data() + n;
    for (size_t i = 0; i < n; ++i) {
      const float g = kernels::WeightDecayGrad(grads[i], params[i], wd);
      kernels::AdamStep(&params[i], &m[i], &v[i], g, b1, b2, step_size, sqrt_bc2, eps);
    }
  }
}

}  // namespace tessera

namespace tessera {

Status DenseOptimizer::Restore(std::span<const float> state, int64_t steps) {
  if (state.size() != state_.size()) {
    return Status::InvalidArgument("dense optimizer state has " + std::to_string(state.size()) + " floats, expected " +
                                   std::to_string(state_.size()));
  }
  std::copy(state.begin(), state.end(), state_.begin());
  steps_ = steps;
  return Status::OK();
}

}  // namespace tessera
