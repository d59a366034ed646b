// ApplySparseOptimizerCpu against a hand-written double reference of each
// optimizer, over several steps that touch different subsets of a table's rows
// (so Adam's per-row step counts differ), from InitSparseOptimizerState.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {
namespace {

// The textbook formulas, in double (torch.optim's Adagrad and Adam; FBGEMM's
// row-wise Adagrad), on one row: w [dim], state as the header lays it out.
void ReferenceStep(const SparseOptimizerConfig& c, int dim, std::vector<double>& w, std::vector<double>& state,
                   const float* grad) {
  std::vector<double> g(dim);
  for (int j = 0; j < dim; ++j) g[j] = grad[j] + static_cast<double>(c.weight_decay) * w[j];
  const double lr = c.lr, eps = c.eps, b1 = c.beta1, b2 = c.beta2;
  switch (c.kind) {
    case SparseOptimizerKind::kSgd:
      for (int j = 0; j < dim; ++j) w[j] -= lr * g[j];
      break;
    case SparseOptimizerKind::kAdagrad:
      for (int j = 0; j < dim; ++j) {
        state[j] += g[j] * g[j];
        w[j] -= lr * g[j] / (std::sqrt(state[j]) + eps);
      }
      break;
    case SparseOptimizerKind::kRowWiseAdagrad: {
      double sum_sq = 0;
      for (int j = 0; j < dim; ++j) sum_sq += g[j] * g[j];
      state[0] += sum_sq / dim;
      for (int j = 0; j < dim; ++j) w[j] -= lr * g[j] / (std::sqrt(state[0]) + eps);
      break;
    }
    case SparseOptimizerKind::kAdam: {
      double& t = state[2 * dim];
      t += 1;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      for (int j = 0; j < dim; ++j) {
        double& m = state[j];
        double& v = state[dim + j];
        m = b1 * m + (1 - b1) * g[j];
        v = b2 * v + (1 - b2) * g[j] * g[j];
        w[j] -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
      }
      break;
    }
  }
}

SparseOptimizerConfig MakeConfig(SparseOptimizerKind kind, float weight_decay) {
  SparseOptimizerConfig c;
  c.kind = kind;
  c.lr = kind == SparseOptimizerKind::kAdam ? 0.01f : 0.1f;
  c.weight_decay = weight_decay;
  c.initial_accumulator = kind == SparseOptimizerKind::kAdam ? 0.0f : 0.1f;
  return c;
}

const SparseOptimizerKind kKinds[] = {SparseOptimizerKind::kSgd, SparseOptimizerKind::kAdagrad,
                                      SparseOptimizerKind::kRowWiseAdagrad, SparseOptimizerKind::kAdam};

TEST(SparseOptimizerTest, MatchesReferenceOverSteps) {
  constexpr int64_t kRows = 10;
  constexpr int64_t kGuard = 16;
  const std::vector<std::vector<int64_t>> steps = {{7, 0, 3}, {0, 9}, {3, 7, 0, 5}, {0}, {9, 3, 0}};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (SparseOptimizerKind kind : kKinds) {
    for (float wd : {0.0f, 0.05f}) {
      for (int dim : {1, 4, 64, 129}) {
        SCOPED_TRACE(::testing::Message() << SparseOptimizerName(kind) << " wd " << wd << " dim " << dim);
        const SparseOptimizerConfig c = MakeConfig(kind, wd);
        const int state_floats = SparseOptimizerStateFloats(kind, dim);
        const int64_t stride = dim + state_floats;
        std::vector<float> table(kRows * stride + kGuard, std::numeric_limits<float>::quiet_NaN());
        std::vector<std::vector<double>> ref_w(kRows, std::vector<double>(dim));
        std::vector<std::vector<double>> ref_state(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
          for (int j = 0; j < dim; ++j) ref_w[r][j] = table[r * stride + j] = value(rng);
          InitSparseOptimizerState(c, dim, &table[r * stride + dim]);
          ref_state[r].assign(table.begin() + r * stride + dim, table.begin() + (r + 1) * stride);
        }
        for (const auto& step_rows : steps) {
          std::vector<float*> rows;
          std::vector<float> grads(step_rows.size() * dim);
          for (float& g : grads) g = value(rng);
          for (size_t i = 0; i < step_rows.size(); ++i) {
            rows.push_back(&table[step_rows[i] * stride]);
            ReferenceStep(c, dim, ref_w[step_rows[i]], ref_state[step_rows[i]], &grads[i * dim]);
          }
          ApplySparseOptimizerCpu(c, dim, rows.data(), grads.data(), static_cast<int64_t>(rows.size()));
        }
        for (int64_t r = 0; r < kRows; ++r) {
          for (int j = 0; j < dim; ++j) {
            ASSERT_NEAR(table[r * stride + j], ref_w[r][j], 2e-6 + 2e-5 * std::fabs(ref_w[r][j])) << r << "," << j;
          }
          for (int k = 0; k < state_floats; ++k) {
            const double want = ref_state[r][k];
            ASSERT_NEAR(table[r * stride + dim + k], want, 1e-7 + 2e-5 * std::fabs(want)) << r << ", state " << k;
          }
        }
        for (int64_t k = 0; k < kGuard; ++k) ASSERT_TRUE(std::isnan(table[kRows * stride + k]));
      }
    }
  }
}

// The dims with a compile-time specialization (16, 32, 64, 128) give the same
// bits as the generic loop: run dim D (specialized) and D + 1 (generic) on the
// same values and compare the first D weights and their state. Row-wise
// Adagrad is left out: its accumulator mixes all of a row's columns.
TEST(SparseOptimizerTest, SpecializedDimsMatchGenericPathBitwise) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  constexpr int64_t kRows = 5;
  for (SparseOptimizerKind kind :
       {SparseOptimizerKind::kSgd, SparseOptimizerKind::kAdagrad, SparseOptimizerKind::kAdam}) {
    for (int dim : {16, 32, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << SparseOptimizerName(kind) << " dim " << dim);
      const SparseOptimizerConfig c = MakeConfig(kind, 0.05f);
      const int wide_dim = dim + 1;
      const int64_t narrow_stride = dim + SparseOptimizerStateFloats(kind, dim);
      const int64_t wide_stride = wide_dim + SparseOptimizerStateFloats(kind, wide_dim);
      std::vector<float> narrow(kRows * narrow_stride), wide(kRows * wide_stride);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int j = 0; j < wide_dim; ++j) wide[r * wide_stride + j] = value(rng);
        std::copy_n(&wide[r * wide_stride], dim, &narrow[r * narrow_stride]);
        InitSparseOptimizerState(c, dim, &narrow[r * narrow_stride + dim]);
        InitSparseOptimizerState(c, wide_dim, &wide[r * wide_stride + wide_dim]);
      }
      for (int step = 0; step < 3; ++step) {
        // Rows in a scrambled order, as a row store hands them out.
        const int64_t order[kRows] = {3, 0, 4, 1, 2};
        std::vector<float*> narrow_rows, wide_rows;
        std::vector<float> narrow_grads(kRows * dim), wide_grads(kRows * wide_dim);
        for (int64_t i = 0; i < kRows; ++i) {
          narrow_rows.push_back(&narrow[order[i] * narrow_stride]);
          wide_rows.push_back(&wide[order[i] * wide_stride]);
          for (int j = 0; j < wide_dim; ++j) wide_grads[i * wide_dim + j] = value(rng);
          std::copy_n(&wide_grads[i * wide_dim], dim, &narrow_grads[i * dim]);
        }
        ApplySparseOptimizerCpu(c, dim, narrow_rows.data(), narrow_grads.data(), kRows);
        ApplySparseOptimizerCpu(c, wide_dim, wide_rows.data(), wide_grads.data(), kRows);
      }
      // Per layout block (weights; Adagrad's sums; Adam's m, v), its first dim
      // floats; then Adam's step count.
      const int blocks = kind == SparseOptimizerKind::kSgd ? 1 : kind == SparseOptimizerKind::kAdagrad ? 2 : 3;
      for (int64_t r = 0; r < kRows; ++r) {
        for (int b = 0; b < blocks; ++b) {
          ASSERT_EQ(0, std::memcmp(&narrow[r * narrow_stride + b * dim], &wide[r * wide_stride + b * wide_dim],
                                   dim * sizeof(float)))
              << "row " << r << " block " << b;
        }
        if (kind == SparseOptimizerKind::kAdam) {
          ASSERT_EQ(narrow[r * narrow_stride + 3 * dim], wide[r * wide_stride + 3 * wide_dim]);
        }
      }
    }
  }
}

// A zero gradient from fresh state leaves the weights exactly as they were
// (no 0/0 in Adagrad or Adam).
TEST(SparseOptimizerTest, ZeroGradientFromFreshStateIsANoOp) {
  for (SparseOptimizerKind kind : kKinds) {
    SparseOptimizerConfig c = MakeConfig(kind, 0.0f);
    c.initial_accumulator = 0.0f;
    const int dim = 5;
    std::vector<float> row(dim + SparseOptimizerStateFloats(kind, dim));
    for (int j = 0; j < dim; ++j) row[j] = 0.25f * j - 0.5f;
    InitSparseOptimizerState(c, dim, row.data() + dim);
    const std::vector<float> before = row;
    const std::vector<float> grads(dim, 0.0f);
    float* rows[] = {row.data()};
    ApplySparseOptimizerCpu(c, dim, rows, grads.data(), 1);
    for (int j = 0; j < dim; ++j) EXPECT_EQ(row[j], before[j]) << SparseOptimizerName(kind);
  }
}

TEST(SparseOptimizerTest, StateLayout) {
  EXPECT_EQ(SparseOptimizerStateFloats(SparseOptimizerKind::kSgd, 8), 0);
  EXPECT_EQ(SparseOptimizerStateFloats(SparseOptimizerKind::kAdagrad, 8), 8);
  EXPECT_EQ(SparseOptimizerStateFloats(SparseOptimizerKind::kRowWiseAdagrad, 8), 1);
  EXPECT_EQ(SparseOptimizerStateFloats(SparseOptimizerKind::kAdam, 8), 17);
  SparseOptimizerConfig c;
  c.initial_accumulator = 0.5f;
  c.kind = SparseOptimizerKind::kAdagrad;
  std::vector<float> state(17, -1.0f);
  InitSparseOptimizerState(c, 8, state.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(state[i], 0.5f);
  EXPECT_EQ(state[8], -1.0f);  // nothing written past the state
  c.kind = SparseOptimizerKind::kAdam;
  InitSparseOptimizerState(c, 8, state.data());
  for (float s : state) EXPECT_EQ(s, 0.0f);
}

TEST(SparseOptimizerTest, NamesRoundTrip) {
  for (SparseOptimizerKind kind : kKinds) {
    SparseOptimizerKind parsed = SparseOptimizerKind::kSgd;
    ASSERT_TRUE(ParseSparseOptimizerKind(SparseOptimizerName(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
  EXPECT_STREQ(SparseOptimizerName(SparseOptimizerKind::kRowWiseAdagrad), "rowwise_adagrad");
  SparseOptimizerKind parsed = SparseOptimizerKind::kAdam;
  EXPECT_FALSE(ParseSparseOptimizerKind("Adam", &parsed));
  EXPECT_FALSE(ParseSparseOptimizerKind("", &parsed));
  EXPECT_EQ(parsed, SparseOptimizerKind::kAdam);
}

}  // namespace
}  // namespace tessera::kernels
