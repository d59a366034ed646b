// The lazy row initializer: its own log and sin/cos against libm's (double)
// over every input a normal draw can give them, the normal law's moments,
// slices of a row against the whole row bit for bit, and values pinned so that
// a change to what a never-written row holds is deliberate.
#include "kernels/row_init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tessera::kernels {
namespace {

// The distance between |ref| as a float and the next float up.
double UlpOf(double ref) {
  const float r = std::fabs(static_cast<float>(ref));
  return std::nextafter(r, std::numeric_limits<float>::infinity()) - r;
}

// Every u1 a draw can give (1 - k 2^-24), and a sweep of all magnitudes.
TEST(RowInitMath, LogIsWithinThreeUlp) {
  double worst = 0;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    const float x = 1.0f - static_cast<float>(k) * (1.0f / 16777216.0f);
    const double ref = std::log(static_cast<double>(x));
    if (ref == 0) {
      ASSERT_EQ(InitLog(x), 0.0f);
      continue;
    }
    worst = std::max(worst, std::fabs(InitLog(x) - ref) / UlpOf(ref));
  }
  for (float x = 1e-37f; x < 1e37f; x *= 1.001f) {
    const double ref = std::log(static_cast<double>(x));
    if (std::fabs(ref) > 1e-6) worst = std::max(worst, std::fabs(InitLog(x) - ref) / UlpOf(ref));
  }
  EXPECT_LE(worst, 3.0);
}

// Every u2 a draw can give (k 2^-24): 2 ulp, and 1e-7 absolute near zeros.
TEST(RowInitMath, SinCosOfTurnsIsWithinTwoUlp) {
  double worst_ulp = 0, worst_abs = 0;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    const float u = static_cast<float>(k) * (1.0f / 16777216.0f);
    float s, c;
    InitSinCosTurns(u, &s, &c);
    const double angle = 2 * M_PI * static_cast<double>(u);
    for (auto [got, ref] : {std::pair<double, double>{s, std::sin(angle)}, {c, std::cos(angle)}}) {
      worst_abs = std::max(worst_abs, std::fabs(got - ref));
      if (std::fabs(ref) > 1e-3) worst_ulp = std::max(worst_ulp, std::fabs(got - ref) / UlpOf(ref));
    }
  }
  EXPECT_LE(worst_ulp, 2.0);
  EXPECT_LE(worst_abs, 1e-7);
}

TEST(RowInit, NormalRowsFollowTheLaw) {
  RowInitializer init;
  init.kind = InitKind::kNormal;
  init.a = 0.5f;
  init.b = 2.0f;
  init.seed = 77;
  constexpr int kDim = 64;
  constexpr int64_t kRows = 20000;
  std::vector<float> row(kDim);
  double sum = 0, sum_sq = 0, sum_cube = 0;
  int64_t beyond_3 = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    InitRow(init, r, 0, kDim, row.data());
    for (float v : row) {
      const double z = (v - init.a) / init.b;
      sum += z;
      sum_sq += z * z;
      sum_cube += z * z * z;
      beyond_3 += std::fabs(z) > 3;
    }
  }
  const double n = static_cast<double>(kRows * kDim);
  // 1.28M draws: the standard errors are 0.0009 (mean), 0.0013 (variance).
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.007);
  EXPECT_NEAR(sum_cube / n, 0.0, 0.02);
  EXPECT_NEAR(static_cast<double>(beyond_3) / n, 0.0027, 0.0005);  // P(|z| > 3)
}

// A column slice (as a column-wise shard holds), starting on an odd or even
// column, and each single value, equal the whole row's bits.
TEST(RowInit, SlicesAndSingleValuesEqualTheWholeRow) {
  for (InitKind kind : {InitKind::kNormal, InitKind::kUniform}) {
    RowInitializer init;
    init.kind = kind;
    init.seed = 5;
    constexpr int kDim = 37;
    for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{123456789}, int64_t{1} << 40}) {
      std::vector<float> whole(kDim);
      InitRow(init, r, 0, kDim, whole.data());
      for (int begin : {0, 1, 2, 5, 36}) {
        for (int len : {1, 2, 7, kDim - begin}) {
          if (begin + len > kDim) continue;
          std::vector<float> slice(len);
          InitRow(init, r, begin, len, slice.data());
          for (int j = 0; j < len; ++j) {
            ASSERT_EQ(std::bit_cast<uint32_t>(slice[j]), std::bit_cast<uint32_t>(whole[begin + j]))
                << "row " << r << " slice [" << begin << ", " << begin + len << ") column " << begin + j;
          }
        }
      }
      for (int j = 0; j < kDim; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(InitValue(init, r, j)), std::bit_cast<uint32_t>(whole[j])) << j;
      }
    }
  }
}

// What a never-written row holds is part of every checkpoint's meaning (its
// rows are stored only once written): these values change only on purpose.
// The uniform ones are those of every earlier version; the normal ones moved
// by an ulp or two when libm's logf and sincosf gave way to InitLog and
// InitSinCosTurns.
TEST(RowInit, ValuesArePinned) {
  RowInitializer uniform;
  uniform.kind = InitKind::kUniform;
  uniform.a = -0.05f;
  uniform.b = 0.05f;
  uniform.seed = 1234;
  RowInitializer normal;
  normal.kind = InitKind::kNormal;
  normal.a = 0.0f;
  normal.b = 1.0f;
  normal.seed = 1234;
  EXPECT_EQ(InitValue(uniform, 0, 0), 0x1.8d88p-12f);
  EXPECT_EQ(InitValue(uniform, 7, 3), -0x1.62f606p-6f);
  EXPECT_EQ(InitValue(uniform, 123456789, 63), -0x1.64bd46p-5f);
  EXPECT_EQ(InitValue(normal, 0, 0), 0x1.87bbccp-1f);
  EXPECT_EQ(InitValue(normal, 7, 3), -0x1.0caf1cp+1f);
  EXPECT_EQ(InitValue(normal, 123456789, 63), 0x1.0db22ap+0f);
}

}  // namespace
}  // namespace tessera::kernels
