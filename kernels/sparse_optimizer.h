// Fused sparse optimizers, applied in place to the rows a gradient touched.
//
// A stored row is [dim weights | state floats]; the state layout per kind:
//   kSgd             none
//   kAdagrad         [dim]        per-element sum of squared gradients
//   kRowWiseAdagrad  [1]          per-row mean of squared gradients, summed
//   kAdam            [dim m | dim v | 1 step]   the row's own update count,
//                    so bias correction follows how often the row was updated
//                    (lazy Adam, as TorchRec/FBGEMM's row-wise variants do)
// The per-element arithmetic lives in sparse_optimizer_math.h (shared with CUDA).
#pragma once

#include <cstdint>
#include <string>

namespace tessera::kernels {

enum class SparseOptimizerKind : uint8_t { kSgd = 0, kAdagrad = 1, kRowWiseAdagrad = 2, kAdam = 3 };

struct SparseOptimizerConfig {
  SparseOptimizerKind kind = SparseOptimizerKind::kSgd;
  float lr = 0.01f;
  // Added to the denominator of the Adagrad/Adam step.
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // L2 penalty added to the gradient (g += weight_decay * w) before the step.
  float weight_decay = 0.0f;
  // Adagrad accumulators start here (torch's initial_accumulator_value).
  float initial_accumulator = 0.0f;
};

// "sgd", "adagrad", "rowwise_adagrad", "adam".
const char* SparseOptimizerName(SparseOptimizerKind kind);
bool ParseSparseOptimizerKind(const std::string& name, SparseOptimizerKind* kind);

// Number of state floats stored after the `dim` weights of each row.
int SparseOptimizerStateFloats(SparseOptimizerKind kind, int dim);

// Writes the initial state of one row (SparseOptimizerStateFloats floats).
void InitSparseOptimizerState(const SparseOptimizerConfig& config, int dim, float* state);

// Applies one step to each of n distinct rows: rows[i] points at row i's
// [dim weights | state]; grads is [n x dim]. Rows must not alias each other.
void ApplySparseOptimizerCpu(const SparseOptimizerConfig& config, int dim, float* const* rows,
                             const float* grads, int64_t n);

}  // namespace tessera::kernels
