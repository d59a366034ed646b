// ApplySparseOptimizerCpu against a hand-written double reference of each
// optimizer, over several steps that touch different subsets of a table's rows
// (so Adam's per-row step counts differ), from InitSparseOptimizerState.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
