// Deterministic, lazy row initialization.
//
// The initial value of element (row, col) of a table is a pure function of
// (table seed, row, col): a counter-based generator (SplitMix64 finalizer), no
// state. So a row that was never written costs nothing until it is used, and
// every server initializes a given row the same way whatever the sharding
// (row-wise shards see the same rows, column-wise shards the same columns).
//
// Normal values are Box-Muller pairs, sqrt(-2 log u1) (cos, sin)(2 pi u2). The
// log and the sine and cosine are polynomials below, not libm's: plain float
// arithmetic with every multiply-add an explicit fmaf, so a row's loop
// vectorizes and every build rounds the same way whatever its contraction
// setting. libm's logf and sincosf were most of a new row's cost (830 ns for
// 64 floats), and new rows are most of what a server does for a table that
// keeps meeting new ids (W1: 14% of its CPU).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/hd.h"

namespace tessera::kernels {

enum class InitKind : uint8_t { kUniform = 0, kNormal = 1, kZeros = 2 };

struct RowInitializer {
  InitKind kind = InitKind::kUniform;
  // kUniform: U(a, b). kNormal: N(mean = a, std = b).
  float a = -0.05f;
  float b = 0.05f;
  uint64_t seed = 0;
};

TESSERA_HD uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 random bits: exactly representable as float.
// (Through int32, which vectorizes: AVX2 has no uint64 to float conversion.)
TESSERA_HD float UnitFloat(uint64_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 40)) * (1.0f / 16777216.0f);
}

// What every value of a row draws from: (seed, row) hashed once per row.
TESSERA_HD uint64_t RowKey(uint64_t seed, int64_t row) {
  return SplitMix64(seed ^ 0x7e55e7a5eed5ULL) ^ SplitMix64(static_cast<uint64_t>(row)) * 31;
}

TESSERA_HD uint64_t InitCounter(uint64_t seed, int64_t row, int64_t col) {
  return SplitMix64(RowKey(seed, row) ^ static_cast<uint64_t>(col));
}

TESSERA_HD uint32_t FloatBits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

TESSERA_HD float BitsFloat(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

// log(x) for a positive normal float x, within 3 ulp (libm's logf: 1): x = 2^e m
// with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(f) for f = (m - 1) / (m + 1),
// |f| < 0.172, by its series to f^11 (the rest is under 1e-10 of the result).
TESSERA_HD float InitLog(float x) {
  const uint32_t bits = FloatBits(x);
  const int32_t e = static_cast<int32_t>(bits - 0x3f3504f3u) >> 23;  // 0x3f3504f3: sqrt(1/2)
  const float m = BitsFloat(bits - (static_cast<uint32_t>(e) << 23));
  const float f = (m - 1.0f) / (m + 1.0f);
  const float q = f * f;
  float p = fmaf(q, 1.0f / 11, 1.0f / 9);
  p = fmaf(p, q, 1.0f / 7);
  p = fmaf(p, q, 1.0f / 5);
  p = fmaf(p, q, 1.0f / 3);
  p = fmaf(p, q, 1.0f);
  return fmaf(static_cast<float>(e), 0.693147180559945309f, 2.0f * f * p);
}

// sin and cos of 2 pi u for u in [0, 1), within 2 ulp (1e-7 absolute near
// their zeros): 4u = q + t with q the nearest integer, and the angle is
// q quarter turns plus x = t pi / 2, |x| <= pi / 4, where Taylor series to
// x^11 and x^10 are exact to float precision.
TESSERA_HD void InitSinCosTurns(float u, float* s, float* c) {
  const float t = u * 4.0f;  // exact
  const float q = rintf(t);
  const float x = (t - q) * 1.57079632679489662f;
  const float x2 = x * x;
  float sp = fmaf(x2, -1.0f / 39916800, 1.0f / 362880);
  sp = fmaf(sp, x2, -1.0f / 5040);
  sp = fmaf(sp, x2, 1.0f / 120);
  sp = fmaf(sp, x2, -1.0f / 6);
  const float sin_x = fmaf(sp * x2, x, x);
  float cp = fmaf(x2, -1.0f / 3628800, 1.0f / 40320);
  cp = fmaf(cp, x2, -1.0f / 720);
  cp = fmaf(cp, x2, 1.0f / 24);
  cp = fmaf(cp, x2, -0.5f);
  const float cos_x = fmaf(cp, x2, 1.0f);
  // sin(q pi/2 + x): sin x, cos x, -sin x, -cos x for q = 0..3 (mod 4);
  // cos(q pi/2 + x): cos x, -sin x, -cos x, sin x.
  const int32_t quarter = static_cast<int32_t>(q);
  const bool odd = (quarter & 1) != 0;
  const float sv = odd ? cos_x : sin_x;
  const float cv = odd ? sin_x : cos_x;
  *s = (quarter & 2) != 0 ? -sv : sv;
  *c = ((quarter + 1) & 2) != 0 ? -cv : cv;
}

// Normal values come in Box-Muller pairs: columns 2k and 2k+1 share one draw
// (cos and sin of the same angle), which halves the transcendental work.
// `row_key` is RowKey(seed, row).
TESSERA_HD void NormalPairOfKey(float mean, float std, uint64_t row_key, int64_t pair, float* even, float* odd) {
  const uint64_t h = SplitMix64(row_key ^ static_cast<uint64_t>(pair));
  const float u1 = 1.0f - UnitFloat(h);  // (0, 1]
  const float u2 = UnitFloat(SplitMix64(h));
  const float r = std * sqrtf(-2.0f * InitLog(u1));
  float s, c;
  InitSinCosTurns(u2, &s, &c);
  *even = fmaf(r, c, mean);
  *odd = fmaf(r, s, mean);
}

TESSERA_HD void NormalPair(const RowInitializer& init, int64_t row, int64_t pair, float* even, float* odd) {
  NormalPairOfKey(init.a, init.b, RowKey(init.seed, row), pair, even, odd);
}

TESSERA_HD float InitValue(const RowInitializer& init, int64_t row, int64_t col) {
  switch (init.kind) {
    case InitKind::kUniform:
      return fmaf(init.b - init.a, UnitFloat(InitCounter(init.seed, row, col)), init.a);
    case InitKind::kNormal: {
      float even, odd;
      NormalPair(init, row, col >> 1, &even, &odd);
      return (col & 1) ? odd : even;
    }
    case InitKind::kZeros:
      return 0.0f;
  }
  return 0.0f;
}

// out[j] = InitValue(init, row, col_begin + j) for j in [0, dim), bit for
// bit (kernels/cpu/row_init_cpu.cc: compiled with the kernels' flags, so its
// loop over a row's pairs vectorizes).
void InitRow(const RowInitializer& init, int64_t row, int64_t col_begin, int dim, float* out);

}  // namespace tessera::kernels
