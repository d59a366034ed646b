#include "trainer/zipf_sampler.h"

#include <string>

namespace tessera {
namespace {

// log1p(x) / x, and its limit 1 at 0.
double Log1pOverX(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

// expm1(x) / x, and its limit 1 at 0.
double ExpM1OverX(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

// h(x) = x^-s.
double H(double s, double x) { return std::exp(-s * std::log(x)); }

// H(x) = (x^(1-s) - 1) / (1 - s) = expm1((1-s) log x) / ((1-s) log x) * log x.
double HIntegral(double s, double x) {
  const double log_x = std::log(x);
  return ExpM1OverX((1.0 - s) * log_x) * log_x;
}

// H^-1(y) = exp(log1p(t) / t * y), t = (1-s) y, with libm.
double HIntegralInverse(double s, double y) {
  double t = y * (1.0 - s);
  if (t < -1.0) t = -1.0;  // rounding only: H^-1 is defined for t >= -1
  return std::exp(Log1pOverX(t) * y);
}

}  // namespace

StatusOr<ZipfSampler> ZipfSampler::Create(int64_t n, double exponent) {
  if (n < 1) return Status::InvalidArgument("Zipf sampler needs n >= 1, got " + std::to_string(n));
  if (!std::isfinite(exponent) || exponent < 0.0) {
    return Status::InvalidArgument("Zipf exponent must be finite and >= 0, got " + std::to_string(exponent));
  }
  return ZipfSampler(n, exponent);
}

ZipfSampler::ZipfSampler(int64_t n, double exponent) : n_(n), s_(exponent), one_minus_s_(1.0 - exponent) {
  CHECK_GE(n, 1);
  CHECK(std::isfinite(exponent) && exponent >= 0.0) << "Zipf exponent " << exponent;
  h_integral_x1_ = HIntegral(s_, 1.5) - 1.0;
  h_integral_n_ = HIntegral(s_, static_cast<double>(n) + 0.5);
  // The paper's squeeze s = 2 - H^-1(H(2.5) - h(2)): when x rounds to r with
  // r - x <= s, u is known to pass the acceptance test of r (h is convex and
  // decreasing), so the logs and exps of the exact test are skipped.
  squeeze_ = 2.0 - HIntegralInverse(s_, HIntegral(s_, 2.5) - H(s_, 2.0));
  // With |1 - s| >= 0.01, log(v) / (1 - s) amplifies v's rounding error
  // (~1e-16 absolute, v being computed from w in one step) at most 100-fold.
  power_path_ = std::abs(one_minus_s_) >= 0.01;
  if (power_path_) {
    inv_one_minus_s_ = 1.0 / one_minus_s_;
    v_x1_ = std::pow(1.5, one_minus_s_) - one_minus_s_;
    // Kept normal for ZipfLog. Only a steep s with a huge n reaches the bound
    // (s > 17, n > 1e18), and then only w < 1e-300 is affected: its x
    // saturates to n, as it nearly does anyway.
    v_n_ = std::max(std::pow(static_cast<double>(n) + 0.5, one_minus_s_), 1e-300);
  }
}

bool ZipfSampler::AcceptExact(double u, double r) const { return u >= HIntegral(s_, r + 0.5) - H(s_, r); }

void ZipfSampler::SampleKeyed(uint64_t key, uint64_t first, int64_t count, int64_t* out) const {
  CHECK_GE(count, 0);
  if (s_ == 0.0) {
    for (int64_t i = 0; i < count; ++i) out[i] = UniformId(UnitDouble(kernels::SplitMix64(key ^ (first + i))));
    return;
  }
  if (n_ == 1) {
    std::fill_n(out, count, 0);
    return;
  }
  // Chunks small enough for the stack and L1.
  constexpr int64_t kChunk = 256;
  double w[kChunk];
  double x[kChunk];
  for (int64_t start = 0; start < count; start += kChunk) {
    const int64_t len = std::min(kChunk, count - start);
    const uint64_t base = first + static_cast<uint64_t>(start);
    // Pass 1, vectorized: each draw's first uniform and its H^-1.
    if (power_path_) {
      for (int64_t i = 0; i < len; ++i) {
        w[i] = UnitDouble(kernels::SplitMix64(key ^ (base + i)));
        x[i] = PowerInverse(w[i]);
      }
    } else {
      for (int64_t i = 0; i < len; ++i) {
        w[i] = UnitDouble(kernels::SplitMix64(key ^ (base + i)));
        x[i] = SeriesInverse(w[i]);
      }
    }
    // Pass 2: round and accept; a rejected draw (a few %) continues its own
    // stream one uniform at a time, exactly as Sample() would.
    for (int64_t i = 0; i < len; ++i) {
      const int64_t r = Round(x[i]);
      if (Accept(w[i], x[i], r)) {
        out[start + i] = r - 1;
      } else {
        KeyedUniforms stream(key, base + i);
        stream();  // the first uniform, just rejected
        out[start + i] = Sample(stream);
      }
    }
  }
}

}  // namespace tessera
