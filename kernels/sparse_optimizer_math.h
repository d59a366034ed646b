// Per-element arithmetic of the sparse optimizers, shared by the CPU kernels
// (kernels/cpu/sparse_optimizer_cpu.cc) and the CUDA kernels. Compiles under
// nvcc: no std:: containers, no logging. Multiply-adds are written as fmaf so
// the rounding does not depend on a compiler's contraction setting.
//
// One step on a row with gradient g (after weight decay, WeightDecayGrad):
//   SGD              w = SgdStep(w, g, lr)
//   Adagrad          acc = AdagradAccumulate(acc, g); w = AdagradStep(w, g, acc, lr, eps)
//   row-wise Adagrad sum_sq = sum_j SquareAccumulate(sum_sq, g_j) (in j order on CPU)
//                    acc = RowWiseAdagradAccumulate(acc, sum_sq, dim)
//                    mult = RowWiseAdagradMultiplier(acc, lr, eps); w = RowWiseAdagradStep(w, g, mult)
//   Adam             step += 1; once per row step_size = AdamStepSize(lr, beta1, step),
//                    sqrt_bc2 = AdamSqrtBiasCorrection2(beta2, step); then AdamStep per
//                    element (torch.optim.Adam's formula).
#pragma once

#include <cmath>

#include "kernels/hd.h"

namespace tessera::kernels {

// L2 penalty folded into the gradient: g + wd * w.
TESSERA_HD float WeightDecayGrad(float g, float w, float weight_decay) { return fmaf(weight_decay, w, g); }

TESSERA_HD float SgdStep(float w, float g, float lr) { return fmaf(-lr, g, w); }

// sum + g * g; the Adagrad accumulator update and the row-wise sum of squares.
TESSERA_HD float SquareAccumulate(float sum, float g) { return fmaf(g, g, sum); }

TESSERA_HD float AdagradAccumulate(float acc, float g) { return SquareAccumulate(acc, g); }

// w - lr * g / (sqrt(acc) + eps), acc already including this step's g^2.
TESSERA_HD float AdagradStep(float w, float g, float acc, float lr, float eps) {
  return w - lr * g / (sqrtf(acc) + eps);
}

// The row's accumulator grows by the mean squared gradient of the row.
TESSERA_HD float RowWiseAdagradAccumulate(float acc, float sum_sq, int dim) {
  return acc + sum_sq / static_cast<float>(dim);
}

// lr / (sqrt(acc) + eps): one multiplier for every element of the row.
TESSERA_HD float RowWiseAdagradMultiplier(float acc, float lr, float eps) { return lr / (sqrtf(acc) + eps); }

TESSERA_HD float RowWiseAdagradStep(float w, float g, float multiplier) { return fmaf(-multiplier, g, w); }

// 1 - beta^step: Adam's bias correction after `step` updates (step >= 1).
TESSERA_HD float AdamBiasCorrection(float beta, float step) { return 1.0f - powf(beta, step); }

// lr / (1 - beta1^step): the step size after first-moment bias correction.
TESSERA_HD float AdamStepSize(float lr, float beta1, float step) { return lr / AdamBiasCorrection(beta1, step); }

// sqrt(1 - beta2^step): divides sqrt(v) for second-moment bias correction.
TESSERA_HD float AdamSqrtBiasCorrection2(float beta2, float step) { return sqrtf(AdamBiasCorrection(beta2, step)); }

// One Adam element update, torch.optim.Adam's formula:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   w -= step_size * m / (sqrt(v) / sqrt_bc2 + eps)
TESSERA_HD void AdamStep(float* w, float* m, float* v, float g, float beta1, float beta2, float step_size,
                         float sqrt_bc2, float eps) {
  const float m_new = fmaf(beta1, *m, (1.0f - beta1) * g);
  const float v_new = fmaf(beta2, *v, (1.0f - beta2) * g * g);
  *m = m_new;
  *v = v_new;
  *w = fmaf(-step_size, m_new / (sqrtf(v_new) / sqrt_bc2 + eps), *w);
}

}  // namespace tessera::kernels
