#include "trainer/dense_optimizer.h"

#include <glog/logging.h>

#include "kernels/sparse_optimizer_math.h"

namespace tessera {

StatusOr<DenseOptimizer> DenseOptimizer::Create(const OptimizerSpec& spec, int64_t num_params,
                                                DenseBackend* backend) {
  DenseOptimizer o;
  o.spec_ = spec;
  o.num_params_ = num_params;
  if (spec.type == "sgd") {
    o.kind_ = kernels::DenseOptimizerKind::kSgd;
  } else if (spec.type == "adagrad") {
    o.kind_ = kernels::DenseOptimizerKind::kAdagrad;
  } else if (spec.type == "adam") {
    o.kind_ = kernels::DenseOptimizerKind::kAdam;
  } else {
    return Status::InvalidArgument("training.dense_optimizer: '" + spec.type +
                                   "' is not a dense optimizer (use sgd, adagrad or adam)");
  }
  if (backend == nullptr) {
    o.owned_backend_ = NewCpuDenseBackend();
    backend = o.owned_backend_.get();
  }
  o.backend_ = backend;
  o.state_ = backend->NewArray();
  const int64_t size = kernels::DenseOptimizerStateSize(o.kind_, num_params);
  TESSERA_RETURN_IF_ERROR(o.state_->Resize(size));
  const float initial = o.kind_ == kernels::DenseOptimizerKind::kAdagrad ? static_cast<float>(spec.initial_accumulator)
                                                                          : 0.0f;
  TESSERA_RETURN_IF_ERROR(o.Restore(std::vector<float>(size, initial), 0));
  return o;
}

Status DenseOptimizer::Step(std::span<float> params, std::span<const float> grads) {
  CHECK_EQ(params.size(), grads.size());
  CHECK_EQ(static_cast<int64_t>(params.size()), num_params_);
  ++steps_;
  kernels::DenseStepArgs a;
  a.kind = kind_;
  a.lr = static_cast<float>(spec_.lr);
  a.eps = static_cast<float>(spec_.eps);
  a.weight_decay = static_cast<float>(spec_.weight_decay);
  a.beta1 = static_cast<float>(spec_.beta1);
  a.beta2 = static_cast<float>(spec_.beta2);
  if (kind_ == kernels::DenseOptimizerKind::kAdam) {
    const float step = static_cast<float>(steps_);
    a.step_size = kernels::AdamStepSize(a.lr, a.beta1, step);
    a.sqrt_bc2 = kernels::AdamSqrtBiasCorrection2(a.beta2, step);
  }
  TESSERA_RETURN_IF_ERROR(
      backend_->DenseOptimizerStep(a, params.data(), grads.data(), state_->data(), num_params_));
  // The parameters are read next by a forward that may run elsewhere (a
  // collective's stream, the host): the step must be done.
  return backend_->Synchronize();
}

StatusOr<std::vector<float>> DenseOptimizer::CopyStateToHost() const {
  std::vector<float> host(state_->size());
  TESSERA_RETURN_IF_ERROR(backend_->CopyToHost(state_->data(), state_->size(), host.data()));
  return host;
}

Status DenseOptimizer::Restore(std::span<const float> state, int64_t steps) {
  if (static_cast<int64_t>(state.size()) != state_->size()) {
    return Status::InvalidArgument("dense optimizer state has " + std::to_string(state.size()) + " floats, expected " +
                                   std::to_string(state_->size()));
  }
  TESSERA_RETURN_IF_ERROR(backend_->CopyFromHost(state.data(), state_->size(), state_->data()));
  TESSERA_RETURN_IF_ERROR(backend_->Synchronize());  // `state` may go away on return
  steps_ = steps;
  return Status::OK();
}

}  // namespace tessera
