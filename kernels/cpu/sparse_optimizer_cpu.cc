// CPU sparse optimizers: one pass per row over [dim weights | state], the
// per-element arithmetic from sparse_optimizer_math.h. Rows are scattered over
// a table, so the next rows are prefetched while the current one is updated.
#include <glog/logging.h>

#include <cstdint>

#include "kernels/sparse_optimizer.h"
#include "kernels/sparse_optimizer_math.h"

namespace tessera::kernels {
namespace {

// Rows ahead whose lines are prefetched: the rows are scattered over a table
// much larger than the caches.
constexpr int64_t kPrefetchRows = 8;
constexpr int kCacheLine = 64;

// Prefetches, for writing, the cache lines holding the `floats` floats at `row`.
inline void PrefetchRowForWrite(const float* row, int floats) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{kCacheLine - 1};
  const uintptr_t last = reinterpret_cast<uintptr_t>(row + floats - 1) & ~uintptr_t{kCacheLine - 1};
  for (uintptr_t line = first; line <= last; line += kCacheLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 3);
  }
}

void SgdRow(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
  for (int j = 0; j < dim; ++j) w[j] = SgdStep(w[j], WeightDecayGrad(g[j], w[j], c.weight_decay), c.lr);
}

void AdagradRow(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
  float* __restrict acc = w + dim;
  for (int j = 0; j < dim; ++j) {
    const float gj = WeightDecayGrad(g[j], w[j], c.weight_decay);
    acc[j] = AdagradAccumulate(acc[j], gj);
    w[j] = AdagradStep(w[j], gj, acc[j], c.lr, c.eps);
  }
}

void RowWiseAdagradRow(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
  float sum_sq = 0.0f;
  for (int j = 0; j < dim; ++j) sum_sq = SquareAccumulate(sum_sq, WeightDecayGrad(g[j], w[j], c.weight_decay));
  float* acc = w + dim;
  *acc = RowWiseAdagradAccumulate(*acc, sum_sq, dim);
  const float multiplier = RowWiseAdagradMultiplier(*acc, c.lr, c.eps);
  for (int j = 0; j < dim; ++j) {
    w[j] = RowWiseAdagradStep(w[j], WeightDecayGrad(g[j], w[j], c.weight_decay), multiplier);
  }
}

void AdamRow(const SparseOptimizerConfig& c, int dim, float* __restrict w, const float* __restrict g) {
  float* __restrict m = w + dim;
  float* __restrict v = w + 2 * dim;
  float* step = w + 3 * dim;
  *step += 1.0f;
  const float step_size = AdamStepSize(c.lr, c.beta1, *step);
  const float sqrt_bc2 = AdamSqrtBiasCorrection2(c.beta2, *step);
  for (int j = 0; j < dim; ++j) {
    AdamStep(&w[j], &m[j], &v[j], WeightDecayGrad(g[j], w[j], c.weight_decay), c.beta1, c.beta2, step_size, sqrt_bc2,
             c.eps);
  }
}

template <void (*kRowStep)(const SparseOptimizerConfig&, int, float*, const float*)>
void ApplyRows(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads, int64_t n) {
  const int row_floats = dim + SparseOptimizerStateFloats(config.kind, dim);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < n) PrefetchRowForWrite(rows[i + kPrefetchRows], row_floats);
    kRowStep(config, dim, rows[i], grads + i * dim);
  }
}

}  // namespace

const char* SparseOptimizerName(SparseOptimizerKind kind) {
  switch (kind) {
    case SparseOptimizerKind::kSgd:
      return "sgd";
    case SparseOptimizerKind::kAdagrad:
      return "adagrad";
    case SparseOptimizerKind::kRowWiseAdagrad:
      return "rowwise_adagrad";
    case SparseOptimizerKind::kAdam:
      return "adam";
  }
  return "unknown";
}

bool ParseSparseOptimizerKind(const std::string& name, SparseOptimizerKind* kind) {
  for (SparseOptimizerKind k : {SparseOptimizerKind::kSgd, SparseOptimizerKind::kAdagrad,
                                SparseOptimizerKind::kRowWiseAdagrad, SparseOptimizerKind::kAdam}) {
    if (name == SparseOptimizerName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

int SparseOptimizerStateFloats(SparseOptimizerKind kind, int dim) {
  switch (kind) {
    case SparseOptimizerKind::kSgd:
      return 0;
    case SparseOptimizerKind::kAdagrad:
      return dim;
    case SparseOptimizerKind::kRowWiseAdagrad:
      return 1;
    case SparseOptimizerKind::kAdam:
      return 2 * dim + 1;
  }
  LOG(FATAL) << "bad SparseOptimizerKind " << static_cast<int>(kind);
  return 0;
}

void InitSparseOptimizerState(const SparseOptimizerConfig& config, int dim, float* state) {
  const int n = SparseOptimizerStateFloats(config.kind, dim);
  // Adagrad accumulators start at initial_accumulator; Adam's m, v and step at 0.
  const float value = config.kind == SparseOptimizerKind::kAdam ? 0.0f : config.initial_accumulator;
  for (int i = 0; i < n; ++i) state[i] = value;
}

void ApplySparseOptimizerCpu(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads,
                             int64_t n) {
  DCHECK_GT(dim, 0);
  switch (config.kind) {
    case SparseOptimizerKind::kSgd:
      return ApplyRows<SgdRow>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kAdagrad:
      return ApplyRows<AdagradRow>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kRowWiseAdagrad:
      return ApplyRows<RowWiseAdagradRow>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kAdam:
      return ApplyRows<AdamRow>(config, dim, rows, grads, n);
  }
  LOG(FATAL) << "bad SparseOptimizerKind " << static_cast<int>(config.kind);
}

}  // namespace tessera::kernels
