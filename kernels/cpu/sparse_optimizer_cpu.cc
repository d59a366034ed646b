// CPU sparse optimizers: one pass per row over [dim weights | state], the
// per-element arithmetic from sparse_optimizer_math.h. Rows are scattered over
// a table, so the next rows are prefetched while the current one is updated.
// The common dims 16/32/64/128 are template parameters (no per-row loop setup,
// no remainder); the element loops are the same, so the bits are too
// (SpecializedDimsMatchGenericPathBitwise).
#include <glog/logging.h>

#include <cstdint>

#include "kernels/cpu/prefetch.h"
#include "kernels/sparse_optimizer.h"
#include "kernels/sparse_optimizer_math.h"

namespace tessera::kernels {
namespace {

// Rows ahead whose lines are prefetched: the rows are scattered over a table
// much larger than the caches. 4 to 16 measured the same on the dev host.
constexpr int64_t kPrefetchRows = 8;

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

// While row i is updated, the row and the gradient kPrefetchRows ahead are
// fetched. The gradients are read in order, which the hardware prefetcher
// mostly covers; prefetching them as well measured neutral and keeps the
// kernel independent of that.
template <typename Optimizer, int kDim>
void ApplyRows(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads, int64_t n) {
  const int64_t row_bytes = static_cast<int64_t>(dim + Optimizer::StateFloats(dim)) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < n) {
      if constexpr (kDim > 0) {
        constexpr int kRowBytes = (kDim + Optimizer::StateFloats(kDim)) * static_cast<int>(sizeof(float));
        constexpr int kGradBytes = kDim * static_cast<int>(sizeof(float));
        PrefetchFixedBytes<kRowBytes, true>(rows[i + kPrefetchRows]);
        PrefetchFixedBytes<kGradBytes, false>(grads + (i + kPrefetchRows) * kDim);
      } else {
        PrefetchBytes<true>(rows[i + kPrefetchRows], row_bytes);
        PrefetchBytes<false>(grads + (i + kPrefetchRows) * dim, dim * sizeof(float));
      }
    }
    Optimizer::template Row<kDim>(config, dim, rows[i], grads + i * dim);
  }
}

template <typename Optimizer>
void ApplyRowsForDim(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads, int64_t n) {
  switch (dim) {
    case 16:
      return ApplyRows<Optimizer, 16>(config, dim, rows, grads, n);
    case 32:
      return ApplyRows<Optimizer, 32>(config, dim, rows, grads, n);
    case 64:
      return ApplyRows<Optimizer, 64>(config, dim, rows, grads, n);
    case 128:
      return ApplyRows<Optimizer, 128>(config, dim, rows, grads, n);
    default:
      return ApplyRows<Optimizer, 0>(config, dim, rows, grads, n);
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
      return Sgd::StateFloats(dim);
    case SparseOptimizerKind::kAdagrad:
      return Adagrad::StateFloats(dim);
    case SparseOptimizerKind::kRowWiseAdagrad:
      return RowWiseAdagrad::StateFloats(dim);
    case SparseOptimizerKind::kAdam:
      return Adam::StateFloats(dim);
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
      return ApplyRowsForDim<Sgd>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kAdagrad:
      return ApplyRowsForDim<Adagrad>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kRowWiseAdagrad:
      return ApplyRowsForDim<RowWiseAdagrad>(config, dim, rows, grads, n);
    case SparseOptimizerKind::kAdam:
      return ApplyRowsForDim<Adam>(config, dim, rows, grads, n);
  }
  LOG(FATAL) << "bad SparseOptimizerKind " << static_cast<int>(config.kind);
}

}  // namespace tessera::kernels
