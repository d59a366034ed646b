// bfloat16 for values on the wire (training.qcomms): float32's sign and
// 8-bit exponent with 7 of its 23 mantissa bits, so half the bytes with
// float32's range (gradients of 1e-30 stay non-zero, unlike fp16's), as
// TorchRec's quantized comms send them. Only the wire narrows: servers and
// trainers compute in float32 and round once, when they send.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace tessera {

// To the nearest bfloat16, ties to even (as a float32 product rounds); NaN
// stays a NaN of the same sign (its payload's top bits kept, so a widened
// bfloat16 NaN narrows back to itself); finite values past bfloat16's
// largest round to infinity, as IEEE rounding does.
inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    const auto top = static_cast<uint16_t>(u >> 16);
    return (top & 0x007fu) != 0 ? top : static_cast<uint16_t>(top | 0x0040u);  // never infinity
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float Bf16BitsToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// One value as it travels; widens to float where a float is wanted (so an
// ArrayFrame<float> can read a frame of them: ReadWidened<Bf16>).
struct Bf16 {
  uint16_t bits = 0;
  operator float() const { return Bf16BitsToFloat(bits); }  // NOLINT: widening is the point
};
static_assert(sizeof(Bf16) == 2);

// Rounds n floats into n bfloat16 values (a loop the compiler vectorizes).
inline void FloatsToBf16(const float* in, size_t n, Bf16* out) {
  for (size_t i = 0; i < n; ++i) out[i].bits = FloatToBf16Bits(in[i]);
}

}  // namespace tessera
