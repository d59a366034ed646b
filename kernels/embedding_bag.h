// Embedding-bag forward and backward (CPU reference; kernels/cuda/ mirrors it).
//
// Layouts, all row-major:
//   rows     [num_rows x row_stride]; the first `dim` floats of a row are the
//            embedding (the rest may hold optimizer state and is not touched)
//   row_ptrs [num_rows] (forward only, instead of rows): row k's first `dim`
//            floats start at row_ptrs[k], any alignment, anywhere in memory
//   indices  [num_ids], each in [0, num_rows): positions into `rows` (a raw
//            table's row ids, or the inverse index after deduplication)
//   offsets  [num_bags + 1], offsets[0] == 0, non-decreasing,
//            offsets[num_bags] == num_ids; bag b holds ids [offsets[b], offsets[b+1])
//   weights  [num_ids] per-id weights, or nullptr for all ones
//   pooled   [num_bags x dim] (kSum, kMean)   unpooled [num_ids x dim] (kNone)
// An empty bag pools to zeros (also for kMean). The caller validates inputs;
// violating the layout above is a programmer error (CHECK in debug builds).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace tessera::kernels {

enum class Pooling : uint8_t { kSum = 0, kMean = 1, kNone = 2 };

// Scale applied to every id of a bag of `len` ids (mean pooling divides).
TESSERA_HD float BagScale(Pooling pooling, int64_t len) {
  return (pooling == Pooling::kMean && len > 0) ? 1.0f / static_cast<float>(len) : 1.0f;
}

template <typename Index>
struct EmbeddingBagForwardArgs {
  // Rows either in one array (rows, row_stride) or, when row_ptrs is set,
  // anywhere: row k starts at row_ptrs[k] (a parameter server pools straight
  // from its store's rows, without copying them out).
  const float* rows = nullptr;
  const float* const* row_ptrs = nullptr;  // [num_rows] or null
  int64_t num_rows = 0;
  int64_t row_stride = 0;  // floats between consecutive rows, >= dim (unused with row_ptrs)
  int dim = 0;
  const Index* indices = nullptr;
  const int64_t* offsets = nullptr;
  int64_t num_bags = 0;
  const float* weights = nullptr;  // nullable
  Pooling pooling = Pooling::kSum;
  float* out = nullptr;  // pooled or unpooled, see above; fully overwritten
};

// Index is int32_t or int64_t.
template <typename Index>
void EmbeddingBagForwardCpu(const EmbeddingBagForwardArgs<Index>& args);

template <typename Index>
struct EmbeddingBagBackwardArgs {
  // [num_bags x dim] for kSum/kMean, [num_ids x dim] for kNone.
  const float* grad_out = nullptr;
  int dim = 0;
  const Index* indices = nullptr;  // in [0, num_rows)
  const int64_t* offsets = nullptr;
  int64_t num_bags = 0;
  const float* weights = nullptr;  // nullable
  Pooling pooling = Pooling::kSum;
  int64_t num_rows = 0;
  // [num_rows x dim], fully overwritten:
  //   grad_rows[u] = sum over ids i with indices[i] == u of
  //                  BagScale(bag(i)) * weight_i * grad_out[bag(i)]   (pooled)
  //                  weight_i * grad_out[i]                              (kNone)
  // Ids are accumulated in increasing i, so the result is deterministic.
  float* grad_rows = nullptr;
};

template <typename Index>
void EmbeddingBagBackwardCpu(const EmbeddingBagBackwardArgs<Index>& args);

}  // namespace tessera::kernels
