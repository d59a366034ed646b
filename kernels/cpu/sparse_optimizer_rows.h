// One sparse optimizer step on one row, per kind: the CPU kernels' shared
// inner loop (sparse_optimizer_cpu.cc applies it to gradient rows,
// embedding_bag_backward_apply_cpu.cc to gradients summed in registers), so
// that both paths give the same bits. Internal to kernels/cpu.
#pragma once

#include "kernels/sparse_optimizer.h"
#include "kernels/sparse_optimizer_math.h"

namespace tessera::kernels::cpu_rows {

// One optimizer step on one row, per kind. kDim > 0 is the row's dim known at
// compile time (the loops unroll and vectorize without a remainder); 0: `dim`.
struct Sgd {
  static constexpr int StateFloats(int /*dim*/) { return 0; }
  template <int kDim>
  static void Row(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
    const int d = kDim > 0 ? kDim : dim;
    for (int j = 0; j < d; ++j) w[j] = SgdStep(w[j], WeightDecayGrad(g[j], w[j], c.weight_decay), c.lr);
  }
};

struct Adagrad {
  static constexpr int StateFloats(int dim) { return dim; }
  template <int kDim>
  static void Row(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
    const int d = kDim > 0 ? kDim : dim;
    float* __restrict acc = w + d;
    for (int j = 0; j < d; ++j) {
      const float gj = WeightDecayGrad(g[j], w[j], c.weight_decay);
      acc[j] = AdagradAccumulate(acc[j], gj);
      w[j] = AdagradStep(w[j], gj, acc[j], c.lr, c.eps);
    }
  }
};

struct RowWiseAdagrad {
  static constexpr int StateFloats(int /*dim*/) { return 1; }
  template <int kDim>
  static void Row(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
    const int d = kDim > 0 ? kDim : dim;
    float sum_sq = 0.0f;
    for (int j = 0; j < d; ++j) sum_sq = SquareAccumulate(sum_sq, WeightDecayGrad(g[j], w[j], c.weight_decay));
    float* acc = w + d;
    *acc = RowWiseAdagradAccumulate(*acc, sum_sq, d);
    const float multiplier = RowWiseAdagradMultiplier(*acc, c.lr, c.eps);
    for (int j = 0; j < d; ++j) {
      w[j] = RowWiseAdagradStep(w[j], WeightDecayGrad(g[j], w[j], c.weight_decay), multiplier);
    }
  }
};

struct Adam {
  static constexpr int StateFloats(int dim) { return 2 * dim + 1; }
  template <int kDim>
  static void Row(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
    const int d = kDim > 0 ? kDim : dim;
    float* __restrict m = w + d;
    float* __restrict v = w + 2 * d;
    float* step = w + 3 * d;
    *step += 1.0f;
    const float step_size = AdamStepSize(c.lr, c.beta1, *step);
    const float sqrt_bc2 = AdamSqrtBiasCorrection2(c.beta2, *step);
    for (int j = 0; j < d; ++j) {
      AdamStep(&w[j], &m[j], &v[j], WeightDecayGrad(g[j], w[j], c.weight_decay), c.beta1, c.beta2, step_size, sqrt_bc2,
               c.eps);
    }
  }
};

}  // namespace tessera::kernels::cpu_rows
