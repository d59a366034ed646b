// FNV-1a 64 and the Criteo categorical hashing built on it.
//
// The preprocessing spec (shared/data/criteo_kaggle_8k/REFERENCE.md) maps the
// value v of categorical column c (C1 is 0) to row
//   FNV1a64([c] ++ bytes(v)) mod num_rows
// where [c] is one byte of value c and a missing value is the empty string.
// Prefixing the column keeps equal hex strings in different columns apart.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// Continues an FNV-1a 64 hash `h` over `bytes`; h = (h ^ b) * prime mod 2^64.
constexpr uint64_t Fnv1a64(std::string_view bytes, uint64_t h = kFnv1a64Offset) {
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= kFnv1a64Prime;
  }
  return h;
}

// FNV1a64([column] ++ bytes). REQUIRES: 0 <= column < 256.
constexpr uint64_t CriteoHash(int column, std::string_view bytes) {
  const uint64_t h = (kFnv1a64Offset ^ static_cast<uint8_t>(column)) * kFnv1a64Prime;
  return Fnv1a64(bytes, h);
}

// The table row of `bytes` in categorical column `column`, in [0, num_rows).
// REQUIRES: 0 <= column < 256, num_rows >= 1.
constexpr int64_t CriteoRow(int column, std::string_view bytes, int64_t num_rows) {
  return static_cast<int64_t>(CriteoHash(column, bytes) % static_cast<uint64_t>(num_rows));
}

}  // namespace tessera
