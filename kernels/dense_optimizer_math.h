// One step of the replicated dense model's optimizer, element by element:
// the arithmetic the CPU loop (trainer/dense_backend_cpu.cc) and the CUDA
// kernel (kernels/cuda/dense_optimizer_cuda.cu) both run, so a checkpoint's
// optimizer state means the same on either and the GPU test compares with the
// CPU reference. The per-element formulas are the sparse optimizers'
// (kernels/sparse_optimizer_math.h).
//
// State layout, n = number of parameters:
//   sgd      none
//   adagrad  [accumulators: n]
//   adam     [m: n | v: n]
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "kernels/sparse_optimizer_math.h"

namespace tessera::kernels {

enum class DenseOptimizerKind : int { kSgd, kAdagrad, kAdam };

// Hyperparameters of one step. step_size and sqrt_bc2 are Adam's bias
// corrections for this step, computed once on the host (AdamStepSize,
// AdamSqrtBiasCorrection2) so both implementations use the same values.
struct DenseStepArgs {
  DenseOptimizerKind kind = DenseOptimizerKind::kSgd;
  float lr = 0, eps = 0, weight_decay = 0, beta1 = 0, beta2 = 0;
  float step_size = 0, sqrt_bc2 = 0;
};

TESSERA_HD void DenseSgdElement(const DenseStepArgs& a, float* w, float g) {
  *w = SgdStep(*w, WeightDecayGrad(g, *w, a.weight_decay), a.lr);
}

TESSERA_HD void DenseAdagradElement(const DenseStepArgs& a, float* w, float* acc, float g) {
  const float gd = WeightDecayGrad(g, *w, a.weight_decay);
  *acc = AdagradAccumulate(*acc, gd);
  *w = AdagradStep(*w, gd, *acc, a.lr, a.eps);
}

TESSERA_HD void DenseAdamElement(const DenseStepArgs& a, float* w, float* m, float* v, float g) {
  const float gd = WeightDecayGrad(g, *w, a.weight_decay);
  AdamStep(w, m, v, gd, a.beta1, a.beta2, a.step_size, a.sqrt_bc2, a.eps);
}

// Floats of optimizer state for n parameters.
inline int64_t DenseOptimizerStateSize(DenseOptimizerKind kind, int64_t n) {
  return kind == DenseOptimizerKind::kAdam ? 2 * n : kind == DenseOptimizerKind::kAdagrad ? n : 0;
}

}  // namespace tessera::kernels
