// The wire's bfloat16 rounding against its definition: the nearest of the
// two bfloat16 neighbours of a float, ties to the even one.
#include "common/bfloat16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace tessera {
namespace {

// The definition, in double: truncate to the bfloat16 below (toward zero),
// take the one above in magnitude, and pick the nearer (the even on a tie).
uint16_t NearestByDefinition(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto down = static_cast<uint16_t>(u >> 16);
  const auto up = static_cast<uint16_t>(down + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double d = std::fabs(static_cast<double>(Bf16BitsToFloat(down)));
  // `up` past the largest finite is infinity: its distance is that of the
  // next power of two, as IEEE rounding takes it.
  const double u_val =
      (up & 0x7f80u) == 0x7f80u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(Bf16BitsToFloat(up)));
  if (x - d < u_val - x) return down;
  if (x - d > u_val - x) return up;
  return (down & 1u) ? up : down;
}

TEST(Bfloat16Test, RoundsToTheNearestTiesToEven) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f) || std::isinf(f)) continue;
    ASSERT_EQ(FloatToBf16Bits(f), NearestByDefinition(f)) << f;
    ++checked;
  }
  EXPECT_GT(checked, 990000);
  // Every tie, in both directions of evenness, and both signs.
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0xbf80u, 0xbf81u, 0x0001u, 0x7f7eu}) {
    const float tie = std::bit_cast<float>((hi << 16) | 0x8000u);
    EXPECT_EQ(FloatToBf16Bits(tie), (hi & 1u) ? hi + 1 : hi) << std::hex << hi;
  }
}

TEST(Bfloat16Test, KeepsWhatItCanHoldAndItsSpecialValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 3.0e38f, 1e-38f, 65536.0f, 0.1f}) {
    // Rounding twice is rounding once.
    const float back = Bf16BitsToFloat(FloatToBf16Bits(Bf16BitsToFloat(FloatToBf16Bits(f))));
    EXPECT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(Bf16BitsToFloat(FloatToBf16Bits(f))));
  }
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(1.0f)), 1.0f);
  EXPECT_TRUE(std::signbit(Bf16BitsToFloat(FloatToBf16Bits(-0.0f))));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(inf)), inf);
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(-inf)), -inf);
  // Past bfloat16's largest finite value: infinity, as IEEE rounding gives.
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(std::numeric_limits<float>::max())), inf);
  // A NaN stays a NaN, whatever its payload (truncating some would give
  // infinity), with its sign.
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7f80ffffu}) {
    const float back = Bf16BitsToFloat(FloatToBf16Bits(std::bit_cast<float>(nan)));
    EXPECT_TRUE(std::isnan(back)) << std::hex << nan;
    EXPECT_EQ(std::signbit(back), (nan >> 31) != 0);
  }
  // A bfloat16 NaN widened and narrowed again is itself (a decoded message
  // encodes back to the same bytes).
  for (uint16_t nan : {uint16_t{0x7f81}, uint16_t{0xffc0}, uint16_t{0x7fff}}) {
    EXPECT_EQ(FloatToBf16Bits(Bf16BitsToFloat(nan)), nan);
  }
  // Subnormal floats keep float32's range: 1e-40 is not flushed to zero.
  EXPECT_GT(Bf16BitsToFloat(FloatToBf16Bits(1e-40f)), 0.0f);
}

TEST(Bfloat16Test, ArraysRoundElementByElement) {
  std::vector<float> in = {1.0f, 1.00390625f, -3.14159f, 1e-20f, 0.0f};
  std::vector<Bf16> out(in.size());
  FloatsToBf16(in.data(), in.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].bits, FloatToBf16Bits(in[i]));
    EXPECT_EQ(static_cast<float>(out[i]), Bf16BitsToFloat(out[i].bits));
  }
  EXPECT_EQ(static_cast<float>(out[1]), 1.0f);  // 1 + 2^-8 is a tie: to the even 1.0
}

}  // namespace
}  // namespace tessera
