// CPU embedding bag. The hot path is a bag's sum over random table rows, which
// is bound by memory latency: the kernel prefetches the rows of the ids
// kPrefetchIds ahead, across bag borders, and for the common dims 16/32/64/128
// keeps a bag's sum in AVX2 registers (the dims are template parameters, so the
// loops over a row unroll completely). Other dims, and builds without AVX2,
// take the generic loop over EmbeddingBagAccumulate/Finish
// (embedding_bag_math.h); the AVX2 code does the same arithmetic lane for lane,
// which SpecializedDimsMatchGenericPathBitwise checks. Rows come from one
// strided array or from a pointer per row (StridedRows / PointedRows below);
// both paths run the same code, so they give the same bits.
#include <glog/logging.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

#include "kernels/cpu/prefetch.h"
#include "kernels/embedding_bag.h"
#include "kernels/embedding_bag_math.h"

namespace tessera::kernels {
namespace {

// How many ids ahead rows are prefetched: enough misses in flight to cover a
// DRAM access (and, on 4 KiB pages, a page walk) per row. In the forward, 24
// beat FBGEMM's 16 by ~10% on the dev host (Zipf ids, 4 KiB pages); 32 was no
// better. The backward's rows are in cache more often: 16; 8 was slower.
constexpr int64_t kPrefetchIds = 24;
constexpr int64_t kPrefetchBackwardIds = 16;

// Prefetches the row at `row` of `dim` floats: kDim > 0 is dim at compile time.
template <int kDim, bool kForWrite>
inline void PrefetchRow(const float* row, int dim) {
  if constexpr (kDim > 0) {
    constexpr int kRowBytes = kDim * static_cast<int>(sizeof(float));
    PrefetchFixedBytes<kRowBytes, kForWrite>(row);
  } else {
    PrefetchBytes<kForWrite>(row, static_cast<int64_t>(dim) * sizeof(float));
  }
}

template <typename Index>
void DcheckLayout(const Index* indices, const int64_t* offsets, int64_t num_bags, int64_t num_rows) {
#ifndef NDEBUG
  CHECK_EQ(offsets[0], 0);
  for (int64_t b = 0; b < num_bags; ++b) CHECK_LE(offsets[b], offsets[b + 1]) << "bag " << b;
  for (int64_t i = 0; i < offsets[num_bags]; ++i) {
    CHECK(indices[i] >= 0 && indices[i] < num_rows) << "id " << i << " = " << indices[i];
  }
#else
  (void)indices, (void)offsets, (void)num_bags, (void)num_rows;
#endif
}

// Where row k of a forward's rows starts: in one array, `stride` floats apart,
// or wherever a pointer table says.
struct StridedRows {
  const float* base;
  int64_t stride;
  const float* operator()(int64_t k) const { return base + k * stride; }
};
struct PointedRows {
  const float* const* ptrs;
  const float* operator()(int64_t k) const { return ptrs[k]; }
};

// Sums the ids [begin, end) of one bag into out[0, kDim) with scale `scale`.
// kDim > 0: the sum lives in registers (AVX2: kDim / 8 ymm accumulators);
// kDim == 0: in out[0, dim).
template <int kDim, bool kWeighted, typename Index, typename Rows>
inline void PoolOneBag(const EmbeddingBagForwardArgs<Index>& a, Rows rows, int dim, int64_t begin, int64_t end,
                       int64_t num_ids, float scale, float* out) {
  const Index* indices = a.indices;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (kDim > 0) {
    // Lane for lane the same arithmetic as EmbeddingBagAccumulate (one fused
    // multiply-add per id; an add when unweighted, equal to fmaf(1, x, acc))
    // and EmbeddingBagFinish (one multiply); the tests hold the two paths to
    // the same bits.
    static_assert(kDim % 8 == 0);
    constexpr int kVecs = kDim / 8;
    __m256 acc[kVecs];
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_setzero_ps();
    for (int64_t i = begin; i < end; ++i) {
      if (i + kPrefetchIds < num_ids) PrefetchRow<kDim, false>(rows(indices[i + kPrefetchIds]), dim);
      const float* row = rows(indices[i]);
      if constexpr (kWeighted) {
        const __m256 w = _mm256_set1_ps(a.weights[i]);
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * v), acc[v]);
      } else {
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(row + 8 * v));
      }
    }
    const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(out + 8 * v, _mm256_mul_ps(acc[v], s));
    return;
  }
#endif
  for (int j = 0; j < dim; ++j) out[j] = 0.0f;
  for (int64_t i = begin; i < end; ++i) {
    if (i + kPrefetchIds < num_ids) PrefetchRow<kDim, false>(rows(indices[i + kPrefetchIds]), dim);
    const float* row = rows(indices[i]);
    const float w = kWeighted ? a.weights[i] : 1.0f;
    for (int j = 0; j < dim; ++j) out[j] = EmbeddingBagAccumulate(out[j], w, row[j]);
  }
  for (int j = 0; j < dim; ++j) out[j] = EmbeddingBagFinish(out[j], scale);
}

template <int kDim, bool kWeighted, typename Index, typename Rows>
void Forward(const EmbeddingBagForwardArgs<Index>& a, Rows rows) {
  const int dim = kDim > 0 ? kDim : a.dim;
  const int64_t num_ids = a.offsets[a.num_bags];
  if (a.pooling == Pooling::kNone) {
    // Every id is a bag of one with scale 1.
    for (int64_t i = 0; i < num_ids; ++i) {
      PoolOneBag<kDim, kWeighted>(a, rows, dim, i, i + 1, num_ids, 1.0f, a.out + i * dim);
    }
    return;
  }
  for (int64_t b = 0; b < a.num_bags; ++b) {
    const int64_t begin = a.offsets[b];
    const int64_t end = a.offsets[b + 1];
    PoolOneBag<kDim, kWeighted>(a, rows, dim, begin, end, num_ids, BagScale(a.pooling, end - begin), a.out + b * dim);
  }
}

// grad_rows[indices[i]] += s_i * g for ids i in [begin, end), in increasing i.
// Rows [0, *zeroed) hold sums so far. An id reaching row r >= *zeroed is the
// row's first: it writes EmbeddingBagAccumulate(0, s_i, g) without reading the
// row, after zeroing the rows in [*zeroed, r) (see Backward).
template <int kDim, bool kWeighted, typename Index>
inline void ScatterOneBag(const EmbeddingBagBackwardArgs<Index>& a, int dim, int64_t begin, int64_t end,
                          int64_t num_ids, float bag_scale, const float* g, int64_t* zeroed) {
  for (int64_t i = begin; i < end; ++i) {
    if (i + kPrefetchBackwardIds < num_ids) {
      PrefetchRow<kDim, true>(a.grad_rows + static_cast<int64_t>(a.indices[i + kPrefetchBackwardIds]) * dim, dim);
    }
    const int64_t row = a.indices[i];
    float* dst = a.grad_rows + row * dim;
    const float s = EmbeddingBagGradScale(bag_scale, kWeighted ? a.weights[i] : 1.0f);
    const bool first = row >= *zeroed;
    if (first) {
      if (row > *zeroed) {
        std::memset(a.grad_rows + *zeroed * dim, 0, (row - *zeroed) * dim * sizeof(float));  // 0.0f: all zero bits
      }
      *zeroed = row + 1;
    }
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (kDim > 0) {
      // Lane for lane EmbeddingBagAccumulate(dst[j], s, g[j]), dst[j] = +0 first.
      static_assert(kDim % 8 == 0);
      const __m256 sv = _mm256_set1_ps(s);
      if (first) {
#pragma GCC unroll 16
        for (int v = 0; v < kDim / 8; ++v) {
          _mm256_storeu_ps(dst + 8 * v, _mm256_fmadd_ps(sv, _mm256_loadu_ps(g + 8 * v), _mm256_setzero_ps()));
        }
      } else {
#pragma GCC unroll 16
        for (int v = 0; v < kDim / 8; ++v) {
          _mm256_storeu_ps(dst + 8 * v, _mm256_fmadd_ps(sv, _mm256_loadu_ps(g + 8 * v), _mm256_loadu_ps(dst + 8 * v)));
        }
      }
      continue;
    }
#endif
    if (first) {
      for (int j = 0; j < dim; ++j) dst[j] = EmbeddingBagAccumulate(0.0f, s, g[j]);
    } else {
      for (int j = 0; j < dim; ++j) dst[j] = EmbeddingBagAccumulate(dst[j], s, g[j]);
    }
  }
}

template <int kDim, bool kWeighted, typename Index>
void Backward(const EmbeddingBagBackwardArgs<Index>& a) {
  const int dim = kDim > 0 ? kDim : a.dim;
  const int64_t num_ids = a.offsets[a.num_bags];
  // grad_rows is not zeroed up front: after deduplication in first-seen order
  // (the usual input) rows are first reached in order, and a row's first id
  // writes it without reading it; rows reached out of order, or never, are
  // zeroed when passed over.
  int64_t zeroed = 0;
  if (a.pooling == Pooling::kNone) {
    for (int64_t i = 0; i < num_ids; ++i) {
      ScatterOneBag<kDim, kWeighted>(a, dim, i, i + 1, num_ids, 1.0f, a.grad_out + i * dim, &zeroed);
    }
  } else {
    for (int64_t b = 0; b < a.num_bags; ++b) {
      const int64_t begin = a.offsets[b];
      const int64_t end = a.offsets[b + 1];
      ScatterOneBag<kDim, kWeighted>(a, dim, begin, end, num_ids, BagScale(a.pooling, end - begin),
                                     a.grad_out + b * dim, &zeroed);
    }
  }
  if (zeroed < a.num_rows) {
    std::memset(a.grad_rows + zeroed * dim, 0, static_cast<size_t>(a.num_rows - zeroed) * dim * sizeof(float));
  }
}

// Picks the instantiation for (dim, weighted): Kernel<kDim, kWeighted>::Run(args).
template <template <int, bool> class Kernel, typename Args>
void DispatchDim(int dim, bool weighted, const Args& args) {
  if (weighted) {
    switch (dim) {
      case 16:
        return Kernel<16, true>::Run(args);
      case 32:
        return Kernel<32, true>::Run(args);
      case 64:
        return Kernel<64, true>::Run(args);
      case 128:
        return Kernel<128, true>::Run(args);
      default:
        return Kernel<0, true>::Run(args);
    }
  }
  switch (dim) {
    case 16:
      return Kernel<16, false>::Run(args);
    case 32:
      return Kernel<32, false>::Run(args);
    case 64:
      return Kernel<64, false>::Run(args);
    case 128:
      return Kernel<128, false>::Run(args);
    default:
      return Kernel<0, false>::Run(args);
  }
}

template <int kDim, bool kWeighted>
struct ForwardKernel {
  template <typename Index>
  static void Run(const EmbeddingBagForwardArgs<Index>& a) {
    if (a.row_ptrs != nullptr) return Forward<kDim, kWeighted>(a, PointedRows{a.row_ptrs});
    Forward<kDim, kWeighted>(a, StridedRows{a.rows, a.row_stride});
  }
};

template <int kDim, bool kWeighted>
struct BackwardKernel {
  template <typename Index>
  static void Run(const EmbeddingBagBackwardArgs<Index>& a) {
    Backward<kDim, kWeighted>(a);
  }
};

}  // namespace

template <typename Index>
void EmbeddingBagForwardCpu(const EmbeddingBagForwardArgs<Index>& args) {
  DCHECK_GT(args.dim, 0);
  DCHECK(args.row_ptrs != nullptr || args.row_stride >= args.dim);
  DcheckLayout(args.indices, args.offsets, args.num_bags, args.num_rows);
  DispatchDim<ForwardKernel>(args.dim, args.weights != nullptr, args);
}

template <typename Index>
void EmbeddingBagBackwardCpu(const EmbeddingBagBackwardArgs<Index>& args) {
  DCHECK_GT(args.dim, 0);
  DcheckLayout(args.indices, args.offsets, args.num_bags, args.num_rows);
  DispatchDim<BackwardKernel>(args.dim, args.weights != nullptr, args);
}

template void EmbeddingBagForwardCpu<int32_t>(const EmbeddingBagForwardArgs<int32_t>&);
template void EmbeddingBagForwardCpu<int64_t>(const EmbeddingBagForwardArgs<int64_t>&);
template void EmbeddingBagBackwardCpu<int32_t>(const EmbeddingBagBackwardArgs<int32_t>&);
template void EmbeddingBagBackwardCpu<int64_t>(const EmbeddingBagBackwardArgs<int64_t>&);

}  // namespace tessera::kernels
