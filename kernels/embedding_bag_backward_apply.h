// The embedding bag's backward fused into the sparse optimizer's pass: each
// distinct row's gradient is summed in registers from the output gradients of
// the bags that use it, and the optimizer step is applied to the row at once,
// so no [rows x dim] gradient array is written and read back (FBGEMM's
// "segment sums" in the optimizer, on the CPU).
//
// Two parts, so that a caller can do the first without holding the lock the
// second needs:
//   BuildRowSegments      the ids grouped by the row they point at (a stable
//                         counting sort of `indices`): which bag's output
//                         gradient each contributes, and with what factor;
//   ApplyRowSegmentsCpu   per row: sum, then one optimizer step.
// Together they equal, bit for bit, EmbeddingBagBackwardCpu into grad_rows
// followed by ApplySparseOptimizerCpu(config, dim, rows, grad_rows, num_rows):
// a row's contributions are summed in increasing id order, as the backward
// does, with the same per-element arithmetic, and the optimizer's row step is
// the same code (kernels/cpu/sparse_optimizer_rows.h). A row no id points at
// gets a zero gradient, as it does there.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/embedding_bag.h"
#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {

// The ids of one request grouped by row. Reusable: vectors keep their capacity.
struct RowSegments {
  int64_t num_rows = 0;
  // Row u's contributions are entries [begin[u], begin[u + 1]).
  std::vector<int32_t> begin;
  // Per entry, in increasing id order within a row: the row of grad_out it
  // reads (the id's bag; the id itself for Pooling::kNone) and its factor
  // (EmbeddingBagGradScale of the bag's scale and the id's weight).
  std::vector<int32_t> source;
  std::vector<float> scale;
};

// Groups the ids of `bags` (indices, offsets, num_bags, weights, pooling,
// num_rows; grad_out, dim and grad_rows are not read) by row. The layout is
// EmbeddingBagBackwardCpu's; REQUIRES: fewer than 2^31 ids and bags.
template <typename Index>
void BuildRowSegments(const EmbeddingBagBackwardArgs<Index>& bags, RowSegments* out);

// For each row u in [0, segments.num_rows): its gradient from grad_out
// ([bags x dim], or [ids x dim] for kNone), then one step of `config` on
// rows[u] ([dim weights | state], as ApplySparseOptimizerCpu). Rows must not
// alias each other.
void ApplyRowSegmentsCpu(const SparseOptimizerConfig& config, int dim, const RowSegments& segments,
                         const float* grad_out, float* const* rows);

}  // namespace tessera::kernels
