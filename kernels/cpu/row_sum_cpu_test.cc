// SumRowsByIndexCpu against zeroing dst and adding every row into it (what
// the server did before): the same bits, for first-seen and scrambled
// indexes, rows no index reaches, negative zeros, and dims with and without
// a vector remainder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/row_sum.h"

namespace tessera::kernels {
namespace {

std::vector<float> Reference(int dim, const std::vector<std::vector<float>>& runs, const std::vector<int32_t>& index,
                             int64_t num_rows) {
  std::vector<float> out(static_cast<size_t>(num_rows) * dim, 0.0f);
  size_t k = 0;
  for (const auto& run : runs) {
    for (size_t i = 0; i < run.size() / dim; ++i, ++k) {
      for (int c = 0; c < dim; ++c) out[index[k] * dim + c] += run[i * dim + c];
    }
  }
  return out;
}

void ExpectSameBits(int dim, const std::vector<std::vector<float>>& runs, const std::vector<int32_t>& index,
                    int64_t num_rows) {
  std::vector<RowRun> spans;
  for (const auto& run : runs) spans.push_back({run.data(), static_cast<int64_t>(run.size()) / dim});
  // Poisoned: a row left unwritten shows.
  std::vector<float> got(static_cast<size_t>(num_rows) * dim, std::numeric_limits<float>::quiet_NaN());
  SumRowsByIndexCpu(dim, spans, index.data(), num_rows, got.data());
  const std::vector<float> want = Reference(dim, runs, index, num_rows);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
}

TEST(RowSumTest, EqualsZeroThenAddBitwise) {
  std::mt19937_64 rng(15);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int dim : {1, 7, 16, 64, 65}) {
    for (bool first_seen : {true, false}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (first_seen ? " first-seen" : " scrambled"));
      const int64_t num_rows = 50;
      // Three runs (trainers) over rows 0..47: rows 48 and 49 are never reached.
      std::vector<std::vector<float>> runs(3);
      std::vector<int32_t> index;
      std::uniform_int_distribution<int32_t> row(0, 47);
      int32_t next_new = 0;
      for (auto& run : runs) {
        for (int i = 0; i < 40; ++i) {
          int32_t u = row(rng);
          if (first_seen && u >= next_new) u = next_new++;  // first-seen order, as a dedup gives
          index.push_back(u);
          for (int c = 0; c < dim; ++c) run.push_back(i % 5 == 0 ? -0.0f : value(rng));
        }
      }
      ExpectSameBits(dim, runs, index, num_rows);
    }
  }
}

TEST(RowSumTest, ANegativeZeroAloneSumsToPositiveZero) {
  const std::vector<std::vector<float>> runs = {{-0.0f, 1.0f}};
  std::vector<float> out(2, 5.0f);
  const RowRun run{runs[0].data(), 1};
  const int32_t index = 0;
  SumRowsByIndexCpu(2, std::span<const RowRun>(&run, 1), &index, 1, out.data());
  EXPECT_FALSE(std::signbit(out[0]));
  EXPECT_EQ(out[1], 1.0f);
}

TEST(RowSumTest, NoRowsZeroesTheOutput) {
  std::vector<float> out(6, 5.0f);
  SumRowsByIndexCpu(3, {}, nullptr, 2, out.data());
  EXPECT_EQ(out, std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace tessera::kernels
