// Fused sparse optimizers on a CUDA device: ApplySparseOptimizerCpu's contract
// (kernels/sparse_optimizer.h: a row is [dim weights | state], the state
// layout per kind) with device memory, on the current device, asynchronously
// on `stream`. The per-element arithmetic is kernels/sparse_optimizer_math.h.
//
// Rounding against the CPU: SGD and Adagrad do the same operations per
// element (differences only where the device's sqrtf/division differ from the
// host's, which IEEE-rounded builds do not). Adam's per-row powf may differ
// from glibc's by an ulp. Row-wise Adagrad sums the row's squared gradients
// as a tree over a lane group, not in column order as the CPU does, so its
// accumulator can differ by rounding. All are deterministic: no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {

// One step on each of n distinct rows: rows [n] is a device array of device
// pointers, row i's [dim weights | state] at rows[i] (any 4-byte alignment);
// grads [n x dim]. Rows must not alias each other.
Status ApplySparseOptimizerCuda(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads,
                                int64_t n, cudaStream_t stream);

// The same on rows of one table: row i is at table + row_ids[i] * row_stride,
// row_stride >= dim + SparseOptimizerStateFloats(kind, dim). row_ids [n] must
// be distinct (deduplicated, e.g. by DedupIdsCuda).
Status ApplySparseOptimizerToTableCuda(const SparseOptimizerConfig& config, int dim, float* table, int64_t row_stride,
                                       const int64_t* row_ids, const float* grads, int64_t n, cudaStream_t stream);

}  // namespace tessera::kernels
