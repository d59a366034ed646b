// DenseOpsCuda against the CPU dense ops on fresh random inputs: Linear
// forward and backward (dW and db accumulate into random contents, dx is
// overwritten or skipped), ReLU forward/backward (exact), BCE loss sum and
// gradient. Matrix products sum in another order than OpenBLAS: each element
// is held to 1e-5 of the sum of its terms' magnitudes. Outputs are
// NaN-poisoned where the op overwrites them.
#include "kernels/cuda/dense_ops_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/test_util_cuda.h"
#include "kernels/dense_ops.h"

namespace tessera::kernels {
namespace {

// Elements of got within 1e-5 * magnitude[i] (plus a floor) of want.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& magnitude) {
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-5 * magnitude[i] + 1e-7;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", CPU " << want[i] << ", tolerance " << tol;
    }
  }
  EXPECT_EQ(failures, 0);
}

class DenseOpsCudaTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    StatusOr<std::unique_ptr<DenseOpsCuda>> ops = DenseOpsCuda::Create(stream_);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ops_ = std::move(ops).value();
  }
  void TearDown() override {
    ops_.reset();
    CudaTest::TearDown();
  }

  std::vector<float> Random(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> v(lo, hi);
    std::vector<float> out(n);
    for (float& x : out) x = v(rng_);
    return out;
  }

  void CheckLinear(int64_t batch, int in, int out, bool with_dx) {
    SCOPED_TRACE(testing::Message() << "batch " << batch << ", in " << in << ", out " << out
                                    << (with_dx ? "" : ", no dx"));
    const std::vector<float> x = Random(batch * in), W = Random(out * in), b = Random(out), dy = Random(batch * out);
    const std::vector<float> dW0 = Random(out * in), db0 = Random(out);
    std::vector<float> y(batch * out), dW = dW0, db = db0, dx(batch * in);
    LinearForward(x.data(), W.data(), b.data(), batch, in, out, y.data());
    LinearBackward(x.data(), W.data(), dy.data(), batch, in, out, dW.data(), db.data(), with_dx ? dx.data() : nullptr);

    DeviceBuffer d_x = ToDevice(x), d_W = ToDevice(W), d_b = ToDevice(b), d_dy = ToDevice(dy);
    DeviceBuffer d_dW = ToDevice(dW0), d_db = ToDevice(db0);
    DeviceBuffer d_y = PoisonedDevice<float>(batch * out), d_dx = PoisonedDevice<float>(batch * in);
    Status s = ops_->LinearForward(d_x.as<float>(), d_W.as<float>(), d_b.as<float>(), batch, in, out, d_y.as<float>());
    ASSERT_TRUE(s.ok()) << s;
    s = ops_->LinearBackward(d_x.as<float>(), d_W.as<float>(), d_dy.as<float>(), batch, in, out, d_dW.as<float>(),
                             d_db.as<float>(), with_dx ? d_dx.as<float>() : nullptr);
    ASSERT_TRUE(s.ok()) << s;
    Sync();

    // Magnitudes: the sums of |terms| of each output element.
    std::vector<double> my(batch * out), mdW(out * in), mdb(out), mdx(batch * in);
    for (int64_t r = 0; r < batch; ++r) {
      for (int o = 0; o < out; ++o) {
        double m = std::fabs(b[o]);
        for (int k = 0; k < in; ++k) m += std::fabs(x[r * in + k] * W[o * in + k]);
        my[r * out + o] = m;
      }
    }
    for (int o = 0; o < out; ++o) {
      mdb[o] = std::fabs(db0[o]);
      for (int64_t r = 0; r < batch; ++r) mdb[o] += std::fabs(dy[r * out + o]);
      for (int k = 0; k < in; ++k) {
        double m = std::fabs(dW0[o * in + k]);
        for (int64_t r = 0; r < batch; ++r) m += std::fabs(dy[r * out + o] * x[r * in + k]);
        mdW[o * in + k] = m;
      }
    }
    for (int64_t r = 0; r < batch; ++r) {
      for (int k = 0; k < in; ++k) {
        double m = 0;
        for (int o = 0; o < out; ++o) m += std::fabs(dy[r * out + o] * W[o * in + k]);
        mdx[r * in + k] = m;
      }
    }
    ExpectClose(ToHost<float>(d_y, y.size()), y, my);
    ExpectClose(ToHost<float>(d_dW, dW.size()), dW, mdW);
    ExpectClose(ToHost<float>(d_db, db.size()), db, mdb);
    const std::vector<float> got_dx = ToHost<float>(d_dx, dx.size());
    if (with_dx) {
      ExpectClose(got_dx, dx, mdx);
    } else {
      for (float v : got_dx) ASSERT_TRUE(std::isnan(v)) << "dx written although null was passed";
    }
  }

  std::unique_ptr<DenseOpsCuda> ops_;
  const uint64_t seed_ = std::random_device{}();
  std::mt19937_64 rng_{seed_};
};

TEST_F(DenseOpsCudaTest, LinearMatchesCpu) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  for (int64_t batch : {1, 37, 512}) {
    for (int in : {1, 13, 64, 300}) {
      for (int out : {1, 8, 100}) CheckLinear(batch, in, out, true);
    }
  }
  CheckLinear(64, 32, 16, false);
}

TEST_F(DenseOpsCudaTest, EmptyBatchIsANoOp) {
  const Status s = ops_->LinearForward(nullptr, nullptr, nullptr, 0, 4, 4, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(ops_->LinearForward(nullptr, nullptr, nullptr, 1, 0, 4, nullptr).ok());
}

TEST_F(DenseOpsCudaTest, ReluMatchesCpuExactly) {
  const int64_t n = 100003;
  std::vector<float> x = Random(n), dy = Random(n);
  x[0] = 0.0f;
  x[1] = -0.0f;
  DeviceBuffer d_x = ToDevice(x);
  ReluForward(x.data(), n);
  ASSERT_TRUE(ops_->ReluForward(d_x.as<float>(), n).ok());
  DeviceBuffer d_dy = ToDevice(dy);
  ReluBackward(x.data(), dy.data(), n);
  ASSERT_TRUE(ops_->ReluBackward(d_x.as<float>(), d_dy.as<float>(), n).ok());
  Sync();
  const std::vector<float> got_x = ToHost<float>(d_x, n), got_dy = ToHost<float>(d_dy, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::signbit(got_x[i]), std::signbit(x[i])) << i;
    ASSERT_EQ(got_x[i], x[i]) << i;
    ASSERT_EQ(got_dy[i], dy[i]) << i;
  }
}

TEST_F(DenseOpsCudaTest, SigmoidBceMatchesCpu) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  for (int64_t n : {1, 1000, 1 << 20}) {
    std::vector<float> logits = Random(n, -30.0f, 30.0f), labels(n);
    std::bernoulli_distribution label(0.3);
    for (float& y : labels) y = label(rng_) ? 1.0f : 0.0f;
    DeviceBuffer d_logits = ToDevice(logits), d_labels = ToDevice(labels);
    DeviceBuffer d_loss = PoisonedDevice<double>(1), d_grad = PoisonedDevice<float>(n);
    ASSERT_TRUE(ops_->SigmoidBceLossSum(d_logits.as<float>(), d_labels.as<float>(), n, d_loss.as<double>()).ok());
    ASSERT_TRUE(
        ops_->SigmoidBceBackward(d_logits.as<float>(), d_labels.as<float>(), n, 0.5f, d_grad.as<float>()).ok());
    Sync();
    const double want = SigmoidBceLossSum(logits.data(), labels.data(), n);
    const double got = ToHost<double>(d_loss, 1)[0];
    // Per element the device's expf/log1pf may differ from glibc's by an ulp
    // or two; the double sums differ only in order.
    EXPECT_NEAR(got, want, 1e-6 * std::fabs(want) + 1e-9) << "n " << n;
    std::vector<float> grad(n);
    SigmoidBceBackward(logits.data(), labels.data(), n, 0.5f, grad.data());
    ExpectClose(ToHost<float>(d_grad, n), grad, std::vector<double>(n, 1.0));
  }
}

}  // namespace
}  // namespace tessera::kernels
