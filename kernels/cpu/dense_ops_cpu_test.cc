// Dense ops against naive loops in double; BCE against known values and a
// finite-difference gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dense_ops.h"

namespace tessera::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> Random(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

struct Shape {
  int64_t batch;
  int in;
  int out;
};
const Shape kShapes[] = {{1, 1, 1}, {1, 13, 7}, {37, 13, 7}, {37, 64, 33}, {5, 129, 1}, {37, 1, 65}};

TEST(DenseOpsTest, LinearForwardMatchesNaive) {
  SetBlasThreads(1);
  std::mt19937_64 rng(21);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.in << " -> " << s.out);
    const auto x = Random(rng, s.batch * s.in);
    const auto W = Random(rng, static_cast<size_t>(s.out) * s.in);
    const auto b = Random(rng, s.out);
    std::vector<float> y(s.batch * s.out + 1, kNaN);
    LinearForward(x.data(), W.data(), b.data(), s.batch, s.in, s.out, y.data());
    for (int64_t r = 0; r < s.batch; ++r) {
      for (int o = 0; o < s.out; ++o) {
        double want = b[o];
        for (int i = 0; i < s.in; ++i) want += static_cast<double>(x[r * s.in + i]) * W[o * s.in + i];
        ASSERT_NEAR(y[r * s.out + o], want, 1e-5 * (1 + s.in)) << r << "," << o;
      }
    }
    EXPECT_TRUE(std::isnan(y.back()));
  }
}

TEST(DenseOpsTest, LinearBackwardMatchesNaive) {
  std::mt19937_64 rng(22);
  for (const Shape& s : kShapes) {
    for (bool with_dx : {true, false}) {
      SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.in << " -> " << s.out << " dx " << with_dx);
      const auto x = Random(rng, s.batch * s.in);
      const auto W = Random(rng, static_cast<size_t>(s.out) * s.in);
      const auto dy = Random(rng, s.batch * s.out);
      const auto dW0 = Random(rng, W.size());  // dW and db accumulate onto these
      const auto db0 = Random(rng, s.out);
      auto dW = dW0;
      auto db = db0;
      std::vector<float> dx(s.batch * s.in + 1, kNaN);
      LinearBackward(x.data(), W.data(), dy.data(), s.batch, s.in, s.out, dW.data(), db.data(),
                     with_dx ? dx.data() : nullptr);
      for (int o = 0; o < s.out; ++o) {
        double want_db = db0[o];
        for (int64_t r = 0; r < s.batch; ++r) want_db += dy[r * s.out + o];
        ASSERT_NEAR(db[o], want_db, 1e-5 * (1 + s.batch));
        for (int i = 0; i < s.in; ++i) {
          double want = dW0[o * s.in + i];
          for (int64_t r = 0; r < s.batch; ++r) want += static_cast<double>(dy[r * s.out + o]) * x[r * s.in + i];
          ASSERT_NEAR(dW[o * s.in + i], want, 1e-5 * (1 + s.batch)) << o << "," << i;
        }
      }
      for (int64_t r = 0; r < s.batch && with_dx; ++r) {
        for (int i = 0; i < s.in; ++i) {
          double want = 0;
          for (int o = 0; o < s.out; ++o) want += static_cast<double>(dy[r * s.out + o]) * W[o * s.in + i];
          ASSERT_NEAR(dx[r * s.in + i], want, 1e-5 * (1 + s.out)) << r << "," << i;
        }
      }
      if (!with_dx) {
        for (float v : dx) ASSERT_TRUE(std::isnan(v));  // untouched
      }
      EXPECT_TRUE(std::isnan(dx.back()));
    }
  }
}

// A backward pass may take the inputs' gradients first and the weights'
// later (the trainer does, to send the embedding gradients early): the two
// halves must give exactly what one call gives.
TEST(DenseOpsTest, LinearBackwardInTwoHalvesEqualsOneCall) {
  std::mt19937_64 rng(7);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.in << " -> " << s.out);
    const auto x = Random(rng, s.batch * s.in);
    const auto W = Random(rng, static_cast<size_t>(s.out) * s.in);
    const auto dy = Random(rng, s.batch * s.out);
    std::vector<float> dW1(W.size(), 0.0f), db1(s.out, 0.0f), dx1(s.batch * s.in, kNaN);
    LinearBackward(x.data(), W.data(), dy.data(), s.batch, s.in, s.out, dW1.data(), db1.data(), dx1.data());
    std::vector<float> dW2(W.size(), 0.0f), db2(s.out, 0.0f), dx2(s.batch * s.in, kNaN);
    LinearBackward(x.data(), W.data(), dy.data(), s.batch, s.in, s.out, nullptr, nullptr, dx2.data());
    EXPECT_EQ(dW2, std::vector<float>(W.size(), 0.0f));
    LinearBackward(x.data(), W.data(), dy.data(), s.batch, s.in, s.out, dW2.data(), db2.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(dW1.data(), dW2.data(), dW1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(db1.data(), db2.data(), db1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)));
  }
}

TEST(DenseOpsTest, Relu) {
  std::vector<float> x = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f, -1e-30f};
  const std::vector<float> want = {0.0f, 0.0f, 0.0f, 1e-30f, 3.5f, 0.0f};
  ReluForward(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(x, want);
  std::vector<float> dy = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  ReluBackward(x.data(), dy.data(), static_cast<int64_t>(dy.size()));
  EXPECT_EQ(dy, (std::vector<float>{0.0f, 0.0f, 0.0f, 4.0f, 5.0f, 0.0f}));
}

double Loss1(float z, float y) { return SigmoidBceLossSum(&z, &y, 1); }

TEST(DenseOpsTest, BceLossKnownValues) {
  EXPECT_NEAR(Loss1(0.0f, 0.0f), std::log(2.0), 1e-7);
  EXPECT_NEAR(Loss1(0.0f, 1.0f), std::log(2.0), 1e-7);
  EXPECT_NEAR(Loss1(0.0f, 0.3f), std::log(2.0), 1e-7);
  EXPECT_NEAR(Loss1(2.0f, 1.0f), std::log1p(std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(Loss1(2.0f, 0.0f), 2.0 + std::log1p(std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(Loss1(-3.0f, 1.0f), 3.0 + std::log1p(std::exp(-3.0)), 1e-6);
  // Large logits: no overflow, no log(0).
  EXPECT_NEAR(Loss1(100.0f, 1.0f), 0.0, 1e-30);
  EXPECT_NEAR(Loss1(100.0f, 0.0f), 100.0, 1e-4);
  EXPECT_NEAR(Loss1(-1000.0f, 1.0f), 1000.0, 1e-3);
  EXPECT_NEAR(Loss1(-1000.0f, 0.0f), 0.0, 1e-30);
  const std::vector<float> z = {0.0f, 2.0f, -3.0f};
  const std::vector<float> y = {1.0f, 1.0f, 0.0f};
  EXPECT_NEAR(SigmoidBceLossSum(z.data(), y.data(), 3),
              std::log(2.0) + std::log1p(std::exp(-2.0)) + std::log1p(std::exp(-3.0)), 1e-6);
}

TEST(DenseOpsTest, BceBackwardMatchesFiniteDifference) {
  const float scale = 0.25f;
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> logit(-8.0f, 8.0f);
  std::uniform_real_distribution<float> label(0.0f, 1.0f);
  for (int k = 0; k < 200; ++k) {
    const float z = logit(rng);
    const float y = k % 3 == 0 ? label(rng) : static_cast<float>(k % 2);
    float grad = kNaN;
    SigmoidBceBackward(&z, &y, 1, scale, &grad);
    const float h = 1e-2f;
    const double numeric = scale * (Loss1(z + h, y) - Loss1(z - h, y)) / (2.0 * h);
    ASSERT_NEAR(grad, numeric, 2e-4) << "z " << z << " y " << y;
  }
  // Saturated logits: the gradient is exactly scale * (0 or 1 - y).
  const std::vector<float> z = {-1000.0f, 1000.0f};
  const std::vector<float> y = {1.0f, 0.0f};
  std::vector<float> grad(2, kNaN);
  SigmoidBceBackward(z.data(), y.data(), 2, scale, grad.data());
  EXPECT_EQ(grad[0], -scale);
  EXPECT_EQ(grad[1], scale);
}

}  // namespace
}  // namespace tessera::kernels
