#include "trainer/zipf_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "kernels/row_init.h"

namespace tessera {
namespace {

using kernels::SplitMix64;

// A deterministic stream of uniforms: SplitMix64 of a counter.
struct CounterUniforms {
  uint64_t next = 0;
  double operator()() { return ZipfSampler::UnitDouble(SplitMix64(next++)); }
};

// Bins for the chi-square test: ids 0..9 one by one, then decades [10, 100),
// [100, 1000), ... clipped at n, so the tail of a large table is checked too.
std::vector<int64_t> BinEdges(int64_t n) {
  std::vector<int64_t> edges;
  for (int64_t k = 0; k < std::min<int64_t>(n, 10); ++k) edges.push_back(k);
  for (int64_t k = 10; k < n; k *= 10) edges.push_back(k);
  edges.push_back(n);
  return edges;
}

// Exact probability mass of each bin: sum of (k+1)^-s over the bin, normalised.
std::vector<double> BinMass(int64_t n, double s, const std::vector<int64_t>& edges) {
  std::vector<double> mass(edges.size() - 1, 0.0);
  double total = 0.0;
  size_t bin = 0;
  for (int64_t k = 0; k < n; ++k) {
    while (k >= edges[bin + 1]) ++bin;
    const double p = std::pow(static_cast<double>(k + 1), -s);
    mass[bin] += p;
    total += p;
  }
  for (double& m : mass) m /= total;
  return mass;
}

int BinOf(int64_t id, const std::vector<int64_t>& edges) {
  int bin = 0;
  while (id >= edges[bin + 1]) ++bin;
  return bin;
}

// Pearson's chi-square of `draws` samples of Zipf(n, sample_s), drawn with
// SampleKeyed() (the batch path the synthetic source uses), against the exact
// pmf of exponent `pmf_s`; *dof = bins - 1. Also checks every id is in range.
double ChiSquare(int64_t n, double sample_s, double pmf_s, int64_t draws, uint64_t seed, int* dof) {
  const ZipfSampler sampler(n, sample_s);
  const std::vector<int64_t> edges = BinEdges(n);
  const std::vector<double> mass = BinMass(n, pmf_s, edges);
  std::vector<int64_t> counts(mass.size(), 0);
  std::vector<int64_t> ids(draws);
  sampler.SampleKeyed(seed, 0, draws, ids.data());
  for (int64_t id : ids) {
    if (id < 0 || id >= n) {
      ADD_FAILURE() << "id " << id << " out of [0, " << n << ")";
      return 1e300;
    }
    ++counts[BinOf(id, edges)];
  }
  double chi2 = 0.0;
  for (size_t b = 0; b < mass.size(); ++b) {
    const double expected = mass[b] * static_cast<double>(draws);
    const double diff = static_cast<double>(counts[b]) - expected;
    chi2 += diff * diff / expected;
  }
  *dof = static_cast<int>(mass.size()) - 1;
  return chi2;
}

// A bound the statistic exceeds with probability ~1e-6 under the null
// (mean dof, sd sqrt(2 dof), plus margin for small dof).
double Bound(int dof) { return dof + 7.0 * std::sqrt(2.0 * dof) + 10.0; }

struct Case {
  double s;
  int64_t n;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "{s=" << c.s << ", n=" << c.n << "}"; }

class ZipfDistributionTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZipfDistributionTest, MatchesExactPmf) {
  const Case c = GetParam();
  int dof = 0;
  const double chi2 = ChiSquare(c.n, c.s, c.s, 1'000'000, 12345, &dof);
  if (c.n == 1) {
    EXPECT_EQ(chi2, 0.0);  // every draw is id 0
    return;
  }
  EXPECT_LT(chi2, Bound(dof)) << "s=" << c.s << " n=" << c.n << " dof=" << dof;
}

INSTANTIATE_TEST_SUITE_P(All, ZipfDistributionTest,
                         ::testing::Values(Case{0.0, 1}, Case{0.0, 10}, Case{0.0, 1'000'000}, Case{0.5, 1},
                                           Case{0.5, 10}, Case{0.5, 1'000'000}, Case{1.0, 1}, Case{1.0, 10},
                                           Case{1.0, 1'000'000}, Case{1.05, 1}, Case{1.05, 10}, Case{1.05, 1'000'000},
                                           Case{1.5, 1}, Case{1.5, 10}, Case{1.5, 1'000'000},
                                           // Within the Taylor branch of the helpers on both sides of 1.
                                           Case{1.0 + 1e-10, 1'000'000}, Case{1.0 - 1e-10, 1000},
                                           // Either side of the switch to the power path (|1 - s| >= 0.01).
                                           Case{0.995, 1'000'000}, Case{1.005, 1'000'000}, Case{0.98, 1'000'000},
                                           Case{1.02, 1'000'000},
                                           // Steep.
                                           Case{3.0, 1'000'000}));

// The test has power: a sample of exponent 1.0 is told apart from a pmf of
// exponent 1.05, and a uniform sample from a Zipf(0.5) pmf.
TEST(ZipfSamplerTest, ChiSquareDetectsWrongExponent) {
  int dof = 0;
  EXPECT_GT(ChiSquare(1'000'000, 1.0, 1.05, 1'000'000, 777, &dof), 10.0 * Bound(dof));
  EXPECT_GT(ChiSquare(10, 0.0, 0.5, 1'000'000, 777, &dof), 10.0 * Bound(dof));
}

// The batch path gives, draw for draw, what Sample() gives on the same
// stream (so the chi-square tests above cover both), including the rejected
// draws that continue their stream.
TEST(ZipfSamplerTest, SampleKeyedMatchesSample) {
  for (double s : {0.0, 0.3, 0.5, 0.995, 1.0, 1.0 + 1e-12, 1.005, 1.05, 1.5, 3.0}) {
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{1'000'000'000}, int64_t{1} << 62}) {
      const ZipfSampler sampler(n, s);
      const uint64_t key = 0xabcdef12345ULL;
      const uint64_t first = 1'000'000'007ULL;
      const int64_t count = 20'011;  // not a multiple of the chunk or vector width
      std::vector<int64_t> batch(count);
      sampler.SampleKeyed(key, first, count, batch.data());
      for (int64_t i = 0; i < count; ++i) {
        KeyedUniforms stream(key, first + i);
        ASSERT_EQ(batch[i], sampler.Sample(stream)) << "s=" << s << " n=" << n << " draw " << i;
        ASSERT_TRUE(batch[i] >= 0 && batch[i] < n);
      }
    }
  }
}

// The vectorizable log and exp against libm.
TEST(ZipfSamplerTest, PolynomialLogAndExp) {
  double worst_log = 0.0;
  double worst_exp = 0.0;
  CounterUniforms uniforms{1};
  for (int i = 0; i < 1'000'000; ++i) {
    const double v = std::exp(uniforms() * 1400.0 - 700.0);
    const double log_v = std::log(v);
    worst_log = std::max(worst_log, std::abs(zipf_internal::ZipfLog(v) - log_v) / std::max(1.0, std::abs(log_v)));
    const double z = uniforms() * 1416.0 - 708.0;
    worst_exp = std::max(worst_exp, std::abs(zipf_internal::ZipfExp(z) - std::exp(z)) / std::exp(z));
  }
  EXPECT_LT(worst_log, 5e-16);
  EXPECT_LT(worst_exp, 1e-15);
  EXPECT_EQ(zipf_internal::ZipfLog(1.0), 0.0);
  EXPECT_EQ(zipf_internal::ZipfExp(0.0), 1.0);
  EXPECT_EQ(zipf_internal::SmallIntToDouble(-1074), -1074.0);
  EXPECT_EQ(zipf_internal::SmallIntToDouble(1023), 1023.0);
}

TEST(ZipfSamplerTest, DeterministicGivenUniforms) {
  const ZipfSampler a(1'000'000'000, 1.05);
  const ZipfSampler b(1'000'000'000, 1.05);
  CounterUniforms ua{99};
  CounterUniforms ub{99};
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(a.Sample(ua), b.Sample(ub));
}

TEST(ZipfSamplerTest, EndsOfTheUniformRange) {
  for (double s : {0.0, 0.5, 1.0, 1.05, 1.5, 3.0}) {
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{10}, int64_t{1'000'000'000}}) {
      const ZipfSampler sampler(n, s);
      // u = 0 is the top of the range: the largest id.
      const int64_t at_zero = sampler.Sample([] { return 0.0; });
      EXPECT_EQ(at_zero, s == 0.0 ? 0 : n - 1) << "s=" << s << " n=" << n;
      // The largest double below 1 gives the other end: id 0 (inverted for
      // s == 0, where id = floor(u n)).
      const double below_one = std::nextafter(1.0, 0.0);
      const int64_t at_one = sampler.Sample([&] { return below_one; });
      EXPECT_EQ(at_one, s == 0.0 ? n - 1 : 0) << "s=" << s << " n=" << n;
    }
  }
}

TEST(ZipfSamplerTest, BillionRowsInRangeAndHeavyHead) {
  const int64_t n = 1'000'000'000;
  const ZipfSampler sampler(n, 1.05);
  CounterUniforms uniforms{5};
  int64_t zeros = 0;
  const int draws = 200'000;
  for (int i = 0; i < draws; ++i) {
    const int64_t id = sampler.Sample(uniforms);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, n);
    zeros += id == 0;
  }
  // P(0) = 1 / sum_{k<=n} k^-1.05 = 1 / 13.4846 (zeta(1.05) - zeta(1.05, n+1),
  // computed with mpmath), about 7.4% of draws; sd of the estimate ~0.0006.
  EXPECT_NEAR(static_cast<double>(zeros) / draws, 1.0 / 13.4846, 0.003);
}

TEST(ZipfSamplerTest, CreateValidates) {
  EXPECT_FALSE(ZipfSampler::Create(0, 1.0).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, -0.1).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, std::nan("")).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, INFINITY).ok());
  auto ok = ZipfSampler::Create(10, 0.0);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->n(), 10);
  EXPECT_EQ(ok->exponent(), 0.0);
}

}  // namespace
}  // namespace tessera
