// The dense optimizer on the CUDA backend against the CPU one: SGD, Adagrad
// and Adam with weight decay, several steps on the same random gradients.
// The arithmetic is shared (kernels/dense_optimizer_math.h) but nvcc may
// contract a multiply and an add the host compiler keeps apart, so elements
// are held to a few ulps, not bits. State moves between the two through the
// host, as in a checkpoint. Skips, visibly, without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_cuda.h"
#include "trainer/dense_backend.h"
#include "trainer/dense_optimizer.h"

namespace tessera {
namespace {

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-6 * std::fabs(want[i]) + 1e-7;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << what << " element " << i << ": GPU " << got[i] << ", CPU " << want[i];
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

class DenseOptimizerCudaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string reason = kernels::NoCudaDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
    auto backend = NewDenseBackend(0);
    ASSERT_TRUE(backend.ok()) << backend.status();
    gpu_ = std::move(backend).value();
  }

  std::unique_ptr<DenseBackend> gpu_;
};

TEST_P(DenseOptimizerCudaTest, MatchesTheCpuOptimizer) {
  OptimizerSpec spec;
  spec.type = GetParam();
  spec.lr = 0.05;
  spec.weight_decay = 1e-3;
  const int64_t n = 1000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> cpu_params(n);
  for (float& p : cpu_params) p = u(rng);

  auto cpu = DenseOptimizer::Create(spec, n);
  auto gpu = DenseOptimizer::Create(spec, n, gpu_.get());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto params = gpu_->NewArray();
  auto grads = gpu_->NewArray();
  ASSERT_TRUE(params->Resize(n).ok());
  ASSERT_TRUE(grads->Resize(n).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(cpu_params.data(), n, params->data()).ok());

  for (int step = 0; step < 5; ++step) {
    std::vector<float> g(n);
    for (float& x : g) x = u(rng);
    ASSERT_TRUE(gpu_->CopyFromHost(g.data(), n, grads->data()).ok());
    ASSERT_TRUE(cpu->Step(cpu_params, g).ok());
    ASSERT_TRUE(gpu->Step(params->span(), grads->span()).ok());
  }
  std::vector<float> gpu_params(n);
  ASSERT_TRUE(gpu_->CopyToHost(params->data(), n, gpu_params.data()).ok());
  ExpectClose(gpu_params, cpu_params, "params");
  StatusOr<std::vector<float>> cpu_state = cpu->CopyStateToHost(), gpu_state = gpu->CopyStateToHost();
  ASSERT_TRUE(cpu_state.ok() && gpu_state.ok());
  ExpectClose(*gpu_state, *cpu_state, "state");
  EXPECT_EQ(gpu->steps(), cpu->steps());

  // A GPU optimizer resumed from the CPU's state takes the CPU's next step.
  auto resumed = DenseOptimizer::Create(spec, n, gpu_.get());
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->Restore(*cpu_state, cpu->steps()).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(cpu_params.data(), n, params->data()).ok());
  std::vector<float> g(n, 0.25f);
  ASSERT_TRUE(gpu_->CopyFromHost(g.data(), n, grads->data()).ok());
  ASSERT_TRUE(cpu->Step(cpu_params, g).ok());
  ASSERT_TRUE(resumed->Step(params->span(), grads->span()).ok());
  ASSERT_TRUE(gpu_->CopyToHost(params->data(), n, gpu_params.data()).ok());
  ExpectClose(gpu_params, cpu_params, "params after resuming");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DenseOptimizerCudaTest, ::testing::Values("sgd", "adagrad", "adam"));

}  // namespace
}  // namespace tessera
