// Deterministic, lazy row initialization.
//
// The initial value of element (row, col) of a table is a pure function of
// (table seed, row, col): a counter-based generator (SplitMix64 finalizer), no
// state. So a row that was never written costs nothing until it is used, and
// every server initializes a given row the same way whatever the sharding
// (row-wise shards see the same rows, column-wise shards the same columns).
#pragma once

#include <cmath>
#include <cstdint>

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
TESSERA_HD float UnitFloat(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

TESSERA_HD uint64_t InitCounter(uint64_t seed, int64_t row, int64_t col) {
  return SplitMix64(SplitMix64(seed ^ 0x7e55e7a5eed5ULL) ^ SplitMix64(static_cast<uint64_t>(row)) * 31 ^
                    static_cast<uint64_t>(col));
}

// Normal values come in Box-Muller pairs: columns 2k and 2k+1 share one draw
// (cos and sin of the same angle), which halves the transcendental work.
TESSERA_HD void NormalPair(const RowInitializer& init, int64_t row, int64_t pair, float* even, float* odd) {
  const uint64_t h = InitCounter(init.seed, row, pair);
  const float u1 = 1.0f - UnitFloat(h);  // (0, 1]
  const float u2 = UnitFloat(SplitMix64(h));
  const float r = init.b * sqrtf(-2.0f * logf(u1));
  float s, c;
  sincosf(6.2831853071795864f * u2, &s, &c);
  *even = init.a + r * c;
  *odd = init.a + r * s;
}

TESSERA_HD float InitValue(const RowInitializer& init, int64_t row, int64_t col) {
  switch (init.kind) {
    case InitKind::kUniform:
      return init.a + (init.b - init.a) * UnitFloat(InitCounter(init.seed, row, col));
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

// out[j] = InitValue(init, row, col_begin + j) for j in [0, dim).
inline void InitRow(const RowInitializer& init, int64_t row, int64_t col_begin, int dim, float* out) {
  if (init.kind != InitKind::kNormal) {
    for (int j = 0; j < dim; ++j) out[j] = InitValue(init, row, col_begin + j);
    return;
  }
  int j = 0;
  if (col_begin & 1) {  // a column slice that starts on an odd column
    out[j] = InitValue(init, row, col_begin);
    ++j;
  }
  for (; j + 1 < dim; j += 2) NormalPair(init, row, (col_begin + j) >> 1, &out[j], &out[j + 1]);
  if (j < dim) out[j] = InitValue(init, row, col_begin + j);
}

}  // namespace tessera::kernels
