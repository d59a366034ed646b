// Sparse optimizers on CUDA: one lane group per row (lanes_cuda.cuh), each
// lane updating its columns with the shared per-element arithmetic.
// Row-wise Adagrad adds the row's squared gradients as a butterfly over the
// group (every lane ends with the same bits), so no lane runs ahead.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_cuda.h"
#include "kernels/cuda/lanes_cuda.cuh"
#include "kernels/cuda/sparse_optimizer_cuda.h"
#include "kernels/sparse_optimizer_math.h"

namespace tessera::kernels {
namespace {

using cuda_detail::Floats;
using cuda_detail::LoadFloats;
using cuda_detail::StoreFloats;
using Kind = SparseOptimizerKind;

// Rows by pointer (any alignment: checked per row) or by id into a table
// (aligned when V == 4, which the launcher checks).
struct PointedRows {
  static constexpr bool kAligned = false;
  float* const* ptrs;
  __device__ __forceinline__ float* operator()(int64_t i) const { return ptrs[i]; }
};
struct TableRows {
  static constexpr bool kAligned = true;
  float* table;
  int64_t stride;
  const int64_t* ids;
  __device__ __forceinline__ float* operator()(int64_t i) const { return table + ids[i] * stride; }
};

struct Params {
  SparseOptimizerConfig c;
  const float* grads;
  int64_t n;
  int dim;
  int lanes_log2;
};

// The lanes of this thread's group, for __syncwarp.
__device__ __forceinline__ unsigned GroupMask(int lanes) {
  if (lanes == 32) return 0xffffffffu;
  const int first = static_cast<int>(threadIdx.x & 31) & ~(lanes - 1);
  return ((1u << lanes) - 1) << first;
}

// The columns [c, c + V) a lane owns, for c = lane*V, lane*V + lanes*V, ...
template <int V>
__device__ __forceinline__ void SgdColumns(const SparseOptimizerConfig& c, float* w, const float* g, int dim, int lane,
                                           int lanes) {
  for (int col = lane * V; col < dim; col += lanes * V) {
    Floats<V> wv = LoadFloats<V, true, false>(w + col);
    const Floats<V> gv = LoadFloats<V, true, true>(g + col);
#pragma unroll
    for (int e = 0; e < V; ++e) wv.x[e] = SgdStep(wv.x[e], WeightDecayGrad(gv.x[e], wv.x[e], c.weight_decay), c.lr);
    StoreFloats<V, true>(w + col, wv);
  }
}

template <int V>
__device__ __forceinline__ void AdagradColumns(const SparseOptimizerConfig& c, float* w, const float* g, int dim,
                                               int lane, int lanes) {
  for (int col = lane * V; col < dim; col += lanes * V) {
    Floats<V> wv = LoadFloats<V, true, false>(w + col);
    Floats<V> acc = LoadFloats<V, true, false>(w + dim + col);
    const Floats<V> gv = LoadFloats<V, true, true>(g + col);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float gj = WeightDecayGrad(gv.x[e], wv.x[e], c.weight_decay);
      acc.x[e] = AdagradAccumulate(acc.x[e], gj);
      wv.x[e] = AdagradStep(wv.x[e], gj, acc.x[e], c.lr, c.eps);
    }
    StoreFloats<V, true>(w + dim + col, acc);
    StoreFloats<V, true>(w + col, wv);
  }
}

// This lane's share of the row's sum of squared (decayed) gradients.
template <int V>
__device__ __forceinline__ float SquareSumColumns(const SparseOptimizerConfig& c, const float* w, const float* g,
                                                  int dim, int lane, int lanes) {
  float sum = 0.0f;
  for (int col = lane * V; col < dim; col += lanes * V) {
    const Floats<V> wv = LoadFloats<V, true, false>(w + col);
    const Floats<V> gv = LoadFloats<V, true, true>(g + col);
#pragma unroll
    for (int e = 0; e < V; ++e) sum = SquareAccumulate(sum, WeightDecayGrad(gv.x[e], wv.x[e], c.weight_decay));
  }
  return sum;
}

template <int V>
__device__ __forceinline__ void RowWiseColumns(const SparseOptimizerConfig& c, float* w, const float* g, int dim,
                                               int lane, int lanes, float multiplier) {
  for (int col = lane * V; col < dim; col += lanes * V) {
    Floats<V> wv = LoadFloats<V, true, false>(w + col);
    const Floats<V> gv = LoadFloats<V, true, true>(g + col);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      wv.x[e] = RowWiseAdagradStep(wv.x[e], WeightDecayGrad(gv.x[e], wv.x[e], c.weight_decay), multiplier);
    }
    StoreFloats<V, true>(w + col, wv);
  }
}

template <int V>
__device__ __forceinline__ void AdamColumns(const SparseOptimizerConfig& c, float* w, const float* g, int dim,
                                            int lane, int lanes, float step_size, float sqrt_bc2) {
  for (int col = lane * V; col < dim; col += lanes * V) {
    Floats<V> wv = LoadFloats<V, true, false>(w + col);
    Floats<V> m = LoadFloats<V, true, false>(w + dim + col);
    Floats<V> v = LoadFloats<V, true, false>(w + 2 * dim + col);
    const Floats<V> gv = LoadFloats<V, true, true>(g + col);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      AdamStep(&wv.x[e], &m.x[e], &v.x[e], WeightDecayGrad(gv.x[e], wv.x[e], c.weight_decay), c.beta1, c.beta2,
               step_size, sqrt_bc2, c.eps);
    }
    StoreFloats<V, true>(w + col, wv);
    StoreFloats<V, true>(w + dim + col, m);
    StoreFloats<V, true>(w + 2 * dim + col, v);
  }
}

// One group per row. V == 4: the grads are 16-byte aligned and so are the
// rows of a table; a row through a pointer that is not takes the V == 1 loop.
template <Kind kKind, int V, typename Rows>
__global__ void __launch_bounds__(cuda_detail::kBlockThreads) OptimizerKernel(Params p, Rows rows) {
  const cuda_detail::GroupLane g = cuda_detail::ThisGroupLane(p.lanes_log2);
  const bool valid = g.group < p.n;
  // Row-wise Adagrad shuffles across the warp: every lane must stay.
  if (kKind != Kind::kRowWiseAdagrad && !valid) return;
  const SparseOptimizerConfig& c = p.c;
  const int dim = p.dim;
  float* w = valid ? rows(g.group) : nullptr;
  const float* grad = p.grads + g.group * dim;
  const bool vec = V == 4 && (Rows::kAligned || cuda_detail::Aligned16(w));
  if constexpr (kKind == Kind::kSgd) {
    vec ? SgdColumns<V>(c, w, grad, dim, g.lane, g.lanes) : SgdColumns<1>(c, w, grad, dim, g.lane, g.lanes);
  } else if constexpr (kKind == Kind::kAdagrad) {
    vec ? AdagradColumns<V>(c, w, grad, dim, g.lane, g.lanes) : AdagradColumns<1>(c, w, grad, dim, g.lane, g.lanes);
  } else if constexpr (kKind == Kind::kRowWiseAdagrad) {
    const float acc = valid ? w[dim] : 0.0f;
    float sum_sq = 0.0f;
    if (valid) {
      sum_sq = vec ? SquareSumColumns<V>(c, w, grad, dim, g.lane, g.lanes)
                   : SquareSumColumns<1>(c, w, grad, dim, g.lane, g.lanes);
    }
    for (int offset = 1; offset < g.lanes; offset <<= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    if (!valid) return;
    const float acc_new = RowWiseAdagradAccumulate(acc, sum_sq, dim);
    const float multiplier = RowWiseAdagradMultiplier(acc_new, c.lr, c.eps);
    vec ? RowWiseColumns<V>(c, w, grad, dim, g.lane, g.lanes, multiplier)
        : RowWiseColumns<1>(c, w, grad, dim, g.lane, g.lanes, multiplier);
    // Every lane read acc before the shuffles, but a shuffle is not a memory
    // fence: order those reads before lane 0's write as the Adam branch does.
    __syncwarp(GroupMask(g.lanes));
    if (g.lane == 0) w[dim] = acc_new;
  } else {
    const float step = w[3 * dim] + 1.0f;
    const float step_size = AdamStepSize(c.lr, c.beta1, step);
    const float sqrt_bc2 = AdamSqrtBiasCorrection2(c.beta2, step);
    vec ? AdamColumns<V>(c, w, grad, dim, g.lane, g.lanes, step_size, sqrt_bc2)
        : AdamColumns<1>(c, w, grad, dim, g.lane, g.lanes, step_size, sqrt_bc2);
    __syncwarp(GroupMask(g.lanes));  // every lane of the row has read the old step
    if (g.lane == 0) w[3 * dim] = step;
  }
}

template <Kind kKind, int V, typename Rows>
Status Launch(const Params& p, Rows rows, cudaStream_t stream) {
  const int64_t blocks = cuda_detail::BlocksFor(p.n, p.lanes_log2);
  OptimizerKernel<kKind, V><<<static_cast<unsigned>(blocks), cuda_detail::kBlockThreads, 0, stream>>>(p, rows);
  return cuda_detail::CheckLaunch("ApplySparseOptimizerCuda");
}

template <int V, typename Rows>
Status LaunchKind(const Params& p, Rows rows, cudaStream_t stream) {
  switch (p.c.kind) {
    case Kind::kSgd:
      return Launch<Kind::kSgd, V>(p, rows, stream);
    case Kind::kAdagrad:
      return Launch<Kind::kAdagrad, V>(p, rows, stream);
    case Kind::kRowWiseAdagrad:
      return Launch<Kind::kRowWiseAdagrad, V>(p, rows, stream);
    case Kind::kAdam:
      return Launch<Kind::kAdam, V>(p, rows, stream);
  }
  return Status::InvalidArgument("ApplySparseOptimizerCuda: unknown optimizer kind");
}

template <typename Rows>
Status Apply(const SparseOptimizerConfig& config, int dim, Rows rows, bool rows_aligned, const float* grads, int64_t n,
             cudaStream_t stream) {
  if (dim <= 0) return Status::InvalidArgument("ApplySparseOptimizerCuda: dim must be positive");
  if (n <= 0) return Status::OK();
  const int vec = dim % 4 == 0 && rows_aligned && cuda_detail::Aligned16(grads) ? 4 : 1;
  const Params p{config, grads, n, dim, cuda_detail::LanesLog2(dim, vec)};
  if (cuda_detail::BlocksFor(n, p.lanes_log2) > INT32_MAX) {
    return Status::InvalidArgument("ApplySparseOptimizerCuda: too many rows for one launch");
  }
  return vec == 4 ? LaunchKind<4>(p, rows, stream) : LaunchKind<1>(p, rows, stream);
}

}  // namespace

Status ApplySparseOptimizerCuda(const SparseOptimizerConfig& config, int dim, float* const* rows, const float* grads,
                                int64_t n, cudaStream_t stream) {
  return Apply(config, dim, PointedRows{rows}, true, grads, n, stream);
}

Status ApplySparseOptimizerToTableCuda(const SparseOptimizerConfig& config, int dim, float* table, int64_t row_stride,
                                       const int64_t* row_ids, const float* grads, int64_t n, cudaStream_t stream) {
  if (row_stride < dim + SparseOptimizerStateFloats(config.kind, dim)) {
    return Status::InvalidArgument("ApplySparseOptimizerToTableCuda: row_stride < dim + state floats");
  }
  const bool aligned = row_stride % 4 == 0 && cuda_detail::Aligned16(table);
  return Apply(config, dim, TableRows{table, row_stride, row_ids}, aligned, grads, n, stream);
}

}  // namespace tessera::kernels
