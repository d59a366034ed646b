// CPU backward fused into the optimizer's pass (see the header). The rows are
// scattered over a table much larger than the caches, so the pass prefetches
// the rows a few ahead for writing; the output gradients (one per bag, a
// request's worth) mostly sit in L2/L3 and are prefetched a few entries ahead.
// For dims 16/32/64/128 with AVX2 a row's sum lives in registers; the lanes do
// EmbeddingBagAccumulate's arithmetic, as the unfused backward's do.
#include <glog/logging.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/sparse_optimizer_rows.h"
#include "kernels/embedding_bag_backward_apply.h"
#include "kernels/embedding_bag_math.h"

namespace tessera::kernels {
namespace {

// Rows ahead prefetched for writing, as ApplySparseOptimizerCpu does.
constexpr int64_t kPrefetchRows = 8;
// Entries ahead whose output-gradient row is prefetched.
constexpr int64_t kPrefetchEntries = 16;

// Sums row u's contributions into g[0, dim): g = 0, then for each entry in
// order g[j] = EmbeddingBagAccumulate(g[j], scale, grad_out[source][j]).
template <int kDim>
inline void SumSegment(const RowSegments& s, int dim, const float* grad_out, int64_t u, int64_t num_entries,
                       float* __restrict g) {
  const int32_t first = s.begin[u], last = s.begin[u + 1];
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (kDim > 0) {
    static_assert(kDim % 8 == 0);
    constexpr int kVecs = kDim / 8;
    __m256 acc[kVecs];
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_setzero_ps();
    for (int32_t e = first; e < last; ++e) {
      if (e + kPrefetchEntries < num_entries) {
        PrefetchFixedBytes<kDim * static_cast<int>(sizeof(float)), false>(
            grad_out + static_cast<int64_t>(s.source[e + kPrefetchEntries]) * kDim);
      }
      const float* src = grad_out + static_cast<int64_t>(s.source[e]) * kDim;
      const __m256 sv = _mm256_set1_ps(s.scale[e]);
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_fmadd_ps(sv, _mm256_loadu_ps(src + 8 * v), acc[v]);
    }
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(g + 8 * v, acc[v]);
    return;
  }
#endif
  const int d = kDim > 0 ? kDim : dim;
  for (int j = 0; j < d; ++j) g[j] = 0.0f;
  for (int32_t e = first; e < last; ++e) {
    if (e + kPrefetchEntries < num_entries) {
      PrefetchBytes<false>(grad_out + static_cast<int64_t>(s.source[e + kPrefetchEntries]) * d, d * sizeof(float));
    }
    const float* src = grad_out + static_cast<int64_t>(s.source[e]) * d;
    const float scale = s.scale[e];
    for (int j = 0; j < d; ++j) g[j] = EmbeddingBagAccumulate(g[j], scale, src[j]);
  }
}

template <typename Optimizer, int kDim>
void ApplySegments(const SparseOptimizerConfig& config, int dim, const RowSegments& s, const float* grad_out,
                   float* const* rows) {
  const int64_t n = s.num_rows;
  const int64_t num_entries = s.begin[n];
  const int64_t row_bytes = static_cast<int64_t>(dim + Optimizer::StateFloats(dim)) * sizeof(float);
  alignas(32) float fixed[kDim > 0 ? kDim : 1];
  std::vector<float> generic(kDim > 0 ? 0 : dim);
  float* g = kDim > 0 ? fixed : generic.data();
  for (int64_t u = 0; u < n; ++u) {
    if (u + kPrefetchRows < n) {
      if constexpr (kDim > 0) {
        PrefetchFixedBytes<(kDim + Optimizer::StateFloats(kDim)) * static_cast<int>(sizeof(float)), true>(
            rows[u + kPrefetchRows]);
      } else {
        PrefetchBytes<true>(rows[u + kPrefetchRows], row_bytes);
      }
    }
    SumSegment<kDim>(s, dim, grad_out, u, num_entries, g);
    Optimizer::template Row<kDim>(config, dim, rows[u], g);
  }
}

template <typename Optimizer>
void ApplySegmentsForDim(const SparseOptimizerConfig& config, int dim, const RowSegments& s, const float* grad_out,
                         float* const* rows) {
  switch (dim) {
    case 16:
      return ApplySegments<Optimizer, 16>(config, dim, s, grad_out, rows);
    case 32:
      return ApplySegments<Optimizer, 32>(config, dim, s, grad_out, rows);
    case 64:
      return ApplySegments<Optimizer, 64>(config, dim, s, grad_out, rows);
    case 128:
      return ApplySegments<Optimizer, 128>(config, dim, s, grad_out, rows);
    default:
      return ApplySegments<Optimizer, 0>(config, dim, s, grad_out, rows);
  }
}

}  // namespace

template <typename Index>
void BuildRowSegments(const EmbeddingBagBackwardArgs<Index>& bags, RowSegments* out) {
  const int64_t num_ids = bags.offsets[bags.num_bags];
  CHECK_LT(num_ids, std::numeric_limits<int32_t>::max());
  CHECK_LT(bags.num_bags, std::numeric_limits<int32_t>::max());
  const int64_t num_rows = bags.num_rows;
  out->num_rows = num_rows;
  // Counting sort: begin[u + 1] counts row u's ids, then the prefix sums
  // place them; `begin` doubles as each row's write cursor and is shifted
  // back afterwards.
  out->begin.assign(static_cast<size_t>(num_rows) + 1, 0);
  int32_t* begin = out->begin.data();
  for (int64_t i = 0; i < num_ids; ++i) {
    DCHECK(bags.indices[i] >= 0 && bags.indices[i] < num_rows) << "id " << i << " = " << bags.indices[i];
    ++begin[bags.indices[i] + 1];
  }
  for (int64_t u = 0; u < num_rows; ++u) begin[u + 1] += begin[u];
  out->source.resize(static_cast<size_t>(num_ids));
  out->scale.resize(static_cast<size_t>(num_ids));
  int32_t* source = out->source.data();
  float* scale = out->scale.data();
  // Row u's cursor is begin[u] (its entries' start until filled, then its end).
  auto place = [&](int64_t i, int64_t from, float s) {
    const int32_t pos = begin[bags.indices[i]]++;
    source[pos] = static_cast<int32_t>(from);
    scale[pos] = s;
  };
  const float* w = bags.weights;
  if (bags.pooling == Pooling::kNone) {
    for (int64_t i = 0; i < num_ids; ++i) place(i, i, EmbeddingBagGradScale(1.0f, w ? w[i] : 1.0f));
  } else {
    for (int64_t b = 0; b < bags.num_bags; ++b) {
      const int64_t first = bags.offsets[b], last = bags.offsets[b + 1];
      const float bag_scale = BagScale(bags.pooling, last - first);
      for (int64_t i = first; i < last; ++i) place(i, b, EmbeddingBagGradScale(bag_scale, w ? w[i] : 1.0f));
    }
  }
  // Every cursor now holds the next row's start: shift them back.
  for (int64_t u = num_rows; u > 0; --u) begin[u] = begin[u - 1];
  begin[0] = 0;
}

void ApplyRowSegmentsCpu(const SparseOptimizerConfig& config, int dim, const RowSegments& segments,
                         const float* grad_out, float* const* rows) {
  DCHECK_GT(dim, 0);
  DCHECK_EQ(segments.begin.size(), static_cast<size_t>(segments.num_rows) + 1);
  switch (config.kind) {
    case SparseOptimizerKind::kSgd:
      return ApplySegmentsForDim<cpu_rows::Sgd>(config, dim, segments, grad_out, rows);
    case SparseOptimizerKind::kAdagrad:
      return ApplySegmentsForDim<cpu_rows::Adagrad>(config, dim, segments, grad_out, rows);
    case SparseOptimizerKind::kRowWiseAdagrad:
      return ApplySegmentsForDim<cpu_rows::RowWiseAdagrad>(config, dim, segments, grad_out, rows);
    case SparseOptimizerKind::kAdam:
      return ApplySegmentsForDim<cpu_rows::Adam>(config, dim, segments, grad_out, rows);
  }
  LOG(FATAL) << "bad SparseOptimizerKind " << static_cast<int>(config.kind);
}

template void BuildRowSegments<int32_t>(const EmbeddingBagBackwardArgs<int32_t>&, RowSegments*);
template void BuildRowSegments<int64_t>(const EmbeddingBagBackwardArgs<int64_t>&, RowSegments*);

}  // namespace tessera::kernels
