// ZipfSampler: ids in [0, n) with P(k) proportional to (k + 1)^-s, s >= 0, in
// O(1) memory, so a table of a billion rows costs a few doubles.
//
// Method: rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-
// inversion to generate variates from monotone discrete distributions", ACM
// TOMACS 6(3), 1996), the algorithm of Apache Commons' RejectionInversionZipf-
// Sampler, written here from the paper. With ranks r = k + 1 in [1, n] and
// h(x) = x^-s, let H(x) = integral_1^x h = (x^(1-s) - 1) / (1 - s) (log x when
// s = 1). Map a uniform w to u in (H(1.5) - 1, H(n + 0.5)], take x = H^-1(u)
// and r = round(x); accept r when x is close enough to r (the squeeze, taken
// ~98% of the time) or when u >= H(r + 0.5) - h(r), else start again with the
// next uniform. The area under h between consecutive half-integers covers each
// rank's mass h(r), so accepted ranks follow the pmf exactly.
//
// Numerics. H^-1(u) = exp(u log1p(t) / t), t = (1 - s) u, evaluated without
// cancellation for every s (the naive (1 + t)^(1/(1-s)) loses all precision as
// s -> 1):
//   |1 - s| >= 0.01: x = exp(log(v) / (1 - s)) where v = 1 + t is an affine
//                    function of w computed in one step (error < 1e-14 of x);
//   |1 - s| <  0.01: log1p(t) / t = 2 atanh(f) / t = 2 P(f^2) / (2 + t) with
//                    f = t / (2 + t), |f| < 0.22 there, P the atanh series to
//                    f^20, so s == 1 (t = 0) needs no special case.
// log and exp are evaluated by the branch-free polynomials below, accurate to
// ~3e-16 (relative to max(1, |result|)), so that SampleKeyed() vectorizes: 4
// draws per AVX2 instruction, ~4x faster than calling libm. The rare exact
// test uses libm with expm1(t)/t, switched to its Taylor series for
// |t| <= 1e-8 (s near 1).
// s == 0 is the uniform distribution and takes a direct path.
//
// A sampler is immutable after construction: its methods are const and may be
// called from any number of threads at once.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "common/status.h"
#include "kernels/row_init.h"

namespace tessera {

// Branch-free log and exp for the sampler's inner loop. Plain double
// arithmetic and bit moves only (no libm call, no int64 <-> double
// conversion instruction, which AVX2 lacks), so the compiler vectorizes them.
namespace zipf_internal {

inline double BitsToDouble(uint64_t bits) { return std::bit_cast<double>(bits); }

// Exactly e, for |e| < 2^51: the integer is placed in the mantissa of 1.5 * 2^52.
inline double SmallIntToDouble(int64_t e) {
  return BitsToDouble(static_cast<uint64_t>(e + (int64_t{1} << 51)) | 0x4330000000000000ULL) - 0x1.8p52;
}

// atanh(f) / f = 1 + q/3 + q^2/5 + ... + q^10/21 with q = f^2; the omitted
// terms are below q^11 / 23 (5e-17 for |f| <= 0.22).
inline double AtanhSeries(double q) {
  double p = 1.0 / 21;
  p = p * q + 1.0 / 19;
  p = p * q + 1.0 / 17;
  p = p * q + 1.0 / 15;
  p = p * q + 1.0 / 13;
  p = p * q + 1.0 / 11;
  p = p * q + 1.0 / 9;
  p = p * q + 1.0 / 7;
  p = p * q + 1.0 / 5;
  p = p * q + 1.0 / 3;
  return p * q + 1.0;
}

inline constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;   // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi * k
inline constexpr double kLn2Lo = 0x1.ef35793c76730p-45;  // is exact for |k| < 2^11

// log(v) for a positive normal v: v = 2^e m with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| < 0.172.
inline double ZipfLog(double v) {
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  const int64_t e = static_cast<int64_t>(bits - 0x3fe6a09e667f3bcdULL) >> 52;  // 0x3fe6...: sqrt(1/2)
  const double m = BitsToDouble(bits - (static_cast<uint64_t>(e) << 52));
  const double f = (m - 1.0) / (m + 1.0);
  const double ed = SmallIntToDouble(e);
  return ed * kLn2Hi + (ed * kLn2Lo + 2.0 * f * AtanhSeries(f * f));
}

// exp(z) for |z| <= 708 (the sampler's z = log x lies in [-1, 44]): z =
// k ln 2 + r with |r| <= ln(2)/2, e^r by its Taylor series to r^12 (remainder
// < 2e-16), 2^k put in the exponent. No clamp: a branch stops vectorization.
inline double ZipfExp(double z) {
  constexpr double kShift = 0x1.8p52;  // adding it rounds to an integer kept in the low bits
  const double shifted = z * 1.4426950408889634 + kShift;
  const double k = shifted - kShift;
  const double r = (z - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 479001600;  // 1/12!
  p = p * r + 1.0 / 39916800;
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The low 12 bits of shifted's representation are k mod 2^12; adding the
  // bias and shifting builds the double 2^k.
  return p * BitsToDouble((std::bit_cast<uint64_t>(shifted) + 1023) << 52);
}

}  // namespace zipf_internal

class ZipfSampler {
 public:
  // Checks n >= 1 and a finite exponent >= 0.
  static StatusOr<ZipfSampler> Create(int64_t n, double exponent);

  // REQUIRES: n >= 1, exponent finite and >= 0 (CHECKed; Create() returns a
  // Status instead).
  ZipfSampler(int64_t n, double exponent);

  int64_t n() const { return n_; }
  double exponent() const { return s_; }

  // Draws one id in [0, n). `uniform()` must return doubles in [0, 1); it is
  // called once per draw, or more when a draw is rejected. The result is a
  // pure function of the values it returns.
  template <typename UniformFn>
  int64_t Sample(UniformFn&& uniform) const {
    if (s_ == 0.0) return UniformId(uniform());
    if (n_ == 1) return 0;
    for (;;) {
      const double w = uniform();
      const double x = Inverse(w);
      const int64_t r = Round(x);
      if (Accept(w, x, r)) return r - 1;
    }
  }

  // out[i] = Sample(KeyedUniforms(key, first + i)) for i in [0, count): draw
  // number `first + i` of the counter-based stream `key`, the same ids as one
  // draw at a time, ~4x faster (vectorized). REQUIRES: count >= 0.
  void SampleKeyed(uint64_t key, uint64_t first, int64_t count, int64_t* out) const;

  // A uniform double in [0, 1) from the top 52 bits of `bits`: the mantissa
  // of a double in [1, 2), minus 1 (exact, and vectorizes, unlike a 64-bit
  // integer to double conversion).
  static double UnitDouble(uint64_t bits) {
    return zipf_internal::BitsToDouble((bits >> 12) | 0x3ff0000000000000ULL) - 1.0;
  }

 private:
  // floor(w n), clipped: w n may round up to n.
  int64_t UniformId(double w) const { return std::min(static_cast<int64_t>(w * static_cast<double>(n_)), n_ - 1); }
  // u = H(n + 0.5) + w (H(1.5) - 1 - H(n + 0.5)): w = 0 is the top end.
  double U(double w) const { return h_integral_n_ + w * (h_integral_x1_ - h_integral_n_); }
  // x = H^-1(U(w)) (see the file comment); the two forms are branch-free.
  double Inverse(double w) const { return power_path_ ? PowerInverse(w) : SeriesInverse(w); }
  double PowerInverse(double w) const {
    const double v = v_n_ + w * (v_x1_ - v_n_);
    return zipf_internal::ZipfExp(zipf_internal::ZipfLog(v) * inv_one_minus_s_);
  }
  double SeriesInverse(double w) const {
    const double u = U(w);
    const double t = u * one_minus_s_;
    const double f = t / (2.0 + t);
    return zipf_internal::ZipfExp(u * 2.0 * zipf_internal::AtanhSeries(f * f) / (2.0 + t));
  }
  // The nearest rank, saturating at n (x may exceed n + 0.5 by rounding).
  int64_t Round(double x) const {
    return x + 0.5 < static_cast<double>(n_) ? std::max<int64_t>(1, static_cast<int64_t>(x + 0.5)) : n_;
  }
  bool Accept(double w, double x, int64_t r) const {
    return static_cast<double>(r) - x <= squeeze_ || AcceptExact(U(w), static_cast<double>(r));
  }
  // u >= H(r + 0.5) - h(r), with libm (rarely reached).
  bool AcceptExact(double u, double r) const;

  int64_t n_ = 1;
  double s_ = 0.0;
  double one_minus_s_ = 1.0;
  double h_integral_x1_ = 0.0;  // H(1.5) - 1: the lower end of u
  double h_integral_n_ = 0.0;   // H(n + 0.5): the upper end of u
  double squeeze_ = 0.0;        // r - x <= squeeze_ accepts without evaluating H
  // |1 - s| >= 0.01: x = v^(1/(1-s)), v = v_n_ + w (v_x1_ - v_n_).
  bool power_path_ = false;
  double inv_one_minus_s_ = 0.0;  // 1 / (1 - s)
  double v_x1_ = 0.0;             // 1 + (1 - s) (H(1.5) - 1)
  double v_n_ = 0.0;              // 1 + (1 - s) H(n + 0.5) = (n + 0.5)^(1-s), >= 1e-300
};

// The uniforms of draw `counter` of the counter-based stream `key`:
// UnitDouble(b_1), UnitDouble(b_2), ... with b_0 = key ^ counter and
// b_{j+1} = SplitMix64(b_j).
class KeyedUniforms {
 public:
  KeyedUniforms(uint64_t key, uint64_t counter) : state_(key ^ counter) {}
  double operator()() {
    state_ = kernels::SplitMix64(state_);
    return ZipfSampler::UnitDouble(state_);
  }

 private:
  uint64_t state_;
};

}  // namespace tessera
