// BuildRowSegments + ApplyRowSegmentsCpu against what they replace,
// EmbeddingBagBackwardCpu into gradient rows then ApplySparseOptimizerCpu:
// the tables must come out bit for bit the same, for every optimizer, pooling,
// weighting and dim (specialized and generic), over several steps, with rows
// first reached out of order and rows no id points at.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/embedding_bag.h"
#include "kernels/embedding_bag_backward_apply.h"
#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {
namespace {

struct Case {
  SparseOptimizerKind kind;
  int dim;
  Pooling pooling;
  bool weighted;
};

std::string Name(const Case& c) {
  return std::string(SparseOptimizerName(c.kind)) + " dim " + std::to_string(c.dim) + " pooling " +
         std::to_string(static_cast<int>(c.pooling)) + (c.weighted ? " weighted" : "");
}

// One request: bags over `num_rows` distinct rows, empty bags included; every
// row but the last two is used, and the first ids reach rows out of order.
struct Request {
  std::vector<int32_t> inverse;
  std::vector<int64_t> offsets;
  std::vector<float> weights;
  std::vector<float> grad_out;
  int64_t num_bags = 0;
};

Request MakeRequest(std::mt19937_64& rng, int64_t num_rows, int dim, Pooling pooling) {
  Request r;
  std::uniform_int_distribution<int> length(0, 25);
  std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(num_rows) - 3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  r.offsets.push_back(0);
  for (int b = 0; b < 60; ++b) {
    const int len = b == 0 || b == 17 ? 0 : length(rng);
    for (int i = 0; i < len; ++i) r.inverse.push_back(row(rng));
    r.offsets.push_back(static_cast<int64_t>(r.inverse.size()));
  }
  r.inverse[0] = static_cast<int32_t>(num_rows) - 3;  // the highest used row first
  r.num_bags = static_cast<int64_t>(r.offsets.size()) - 1;
  for (size_t i = 0; i < r.inverse.size(); ++i) r.weights.push_back(value(rng) * 2.0f);
  const int64_t out_rows = pooling == Pooling::kNone ? static_cast<int64_t>(r.inverse.size()) : r.num_bags;
  for (int64_t i = 0; i < out_rows * dim; ++i) r.grad_out.push_back(value(rng));
  return r;
}

EmbeddingBagBackwardArgs<int32_t> Bags(const Request& r, const Case& c, int64_t num_rows) {
  EmbeddingBagBackwardArgs<int32_t> a;
  a.grad_out = r.grad_out.data();
  a.dim = c.dim;
  a.indices = r.inverse.data();
  a.offsets = r.offsets.data();
  a.num_bags = r.num_bags;
  a.weights = c.weighted ? r.weights.data() : nullptr;
  a.pooling = c.pooling;
  a.num_rows = num_rows;
  return a;
}

// Rows [dim weights | state] at scattered places of one buffer, as a store's.
struct Table {
  std::vector<float> buffer;
  std::vector<float*> rows;
};

Table MakeTable(const SparseOptimizerConfig& config, int dim, int64_t num_rows) {
  const int width = dim + SparseOptimizerStateFloats(config.kind, dim);
  Table t;
  t.buffer.resize(static_cast<size_t>(num_rows) * (width + 3));
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  for (int64_t u = 0; u < num_rows; ++u) {
    // Row u at a place that is not u's: reversed, odd offsets.
    float* row = t.buffer.data() + (num_rows - 1 - u) * (width + 3) + 1;
    for (int j = 0; j < dim; ++j) row[j] = value(rng);
    InitSparseOptimizerState(config, dim, row + dim);
    t.rows.push_back(row);
  }
  return t;
}

TEST(EmbeddingBagBackwardApplyTest, EqualsBackwardThenOptimizerBitwise) {
  const int64_t kRows = 300;
  std::vector<Case> cases;
  for (auto kind : {SparseOptimizerKind::kSgd, SparseOptimizerKind::kAdagrad, SparseOptimizerKind::kRowWiseAdagrad,
                    SparseOptimizerKind::kAdam}) {
    for (int dim : {16, 32, 64, 128, 5, 24}) {
      for (auto pooling : {Pooling::kSum, Pooling::kMean, Pooling::kNone}) {
        for (bool weighted : {false, true}) cases.push_back({kind, dim, pooling, weighted});
      }
    }
  }
  std::mt19937_64 rng(2026);
  RowSegments segments;  // reused across cases, as a server thread does
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    SparseOptimizerConfig config;
    config.kind = c.kind;
    config.lr = 0.05f;
    config.weight_decay = 0.01f;  // so rows without ids change too
    config.initial_accumulator = 0.1f;
    Table fused = MakeTable(config, c.dim, kRows);
    Table unfused = MakeTable(config, c.dim, kRows);
    std::vector<float> grad_rows;
    for (int step = 0; step < 3; ++step) {
      const Request r = MakeRequest(rng, kRows, c.dim, c.pooling);
      EmbeddingBagBackwardArgs<int32_t> a = Bags(r, c, kRows);
      grad_rows.assign(static_cast<size_t>(kRows) * c.dim, 0.0f);
      a.grad_rows = grad_rows.data();
      EmbeddingBagBackwardCpu(a);
      ApplySparseOptimizerCpu(config, c.dim, unfused.rows.data(), grad_rows.data(), kRows);

      BuildRowSegments(Bags(r, c, kRows), &segments);
      ApplyRowSegmentsCpu(config, c.dim, segments, r.grad_out.data(), fused.rows.data());
    }
    ASSERT_EQ(0, std::memcmp(fused.buffer.data(), unfused.buffer.data(), fused.buffer.size() * sizeof(float)));
  }
}

TEST(EmbeddingBagBackwardApplyTest, SegmentsGroupIdsByRowInIdOrder) {
  // Bags {2, 0, 2} {} {1, 2}; row 3 unused; mean pooling, weights.
  const std::vector<int32_t> inverse = {2, 0, 2, 1, 2};
  const std::vector<int64_t> offsets = {0, 3, 3, 5};
  const std::vector<float> weights = {1.0f, 2.0f, 4.0f, 8.0f, 0.5f};
  EmbeddingBagBackwardArgs<int32_t> a;
  a.indices = inverse.data();
  a.offsets = offsets.data();
  a.num_bags = 3;
  a.weights = weights.data();
  a.pooling = Pooling::kMean;
  a.num_rows = 4;
  RowSegments s;
  BuildRowSegments(a, &s);
  EXPECT_EQ(s.num_rows, 4);
  EXPECT_EQ(s.begin, (std::vector<int32_t>{0, 1, 2, 5, 5}));
  EXPECT_EQ(s.source, (std::vector<int32_t>{0, 2, 0, 0, 2}));
  EXPECT_EQ(s.scale, (std::vector<float>{2.0f / 3.0f, 8.0f / 2.0f, 1.0f / 3.0f, 4.0f / 3.0f, 0.5f / 2.0f}));

  a.pooling = Pooling::kNone;  // each id its own output row, scale = weight
  BuildRowSegments(a, &s);
  EXPECT_EQ(s.begin, (std::vector<int32_t>{0, 1, 2, 5, 5}));
  EXPECT_EQ(s.source, (std::vector<int32_t>{1, 3, 0, 2, 4}));
  EXPECT_EQ(s.scale, (std::vector<float>{2.0f, 8.0f, 1.0f, 4.0f, 0.5f}));
}

TEST(EmbeddingBagBackwardApplyTest, NoIdsStillStepsEveryRow) {
  // No bags at all: every row gets a zero gradient, as the unfused path gives
  // it; Adam counts the step.
  SparseOptimizerConfig config;
  config.kind = SparseOptimizerKind::kAdam;
  const int dim = 8;
  Table t = MakeTable(config, dim, 2);
  const std::vector<int64_t> offsets = {0};
  EmbeddingBagBackwardArgs<int32_t> a;
  a.offsets = offsets.data();
  a.num_bags = 0;
  a.num_rows = 2;
  RowSegments s;
  BuildRowSegments(a, &s);
  ApplyRowSegmentsCpu(config, dim, s, nullptr, t.rows.data());
  for (float* row : t.rows) EXPECT_EQ(row[3 * dim], 1.0f);
}

}  // namespace
}  // namespace tessera::kernels
