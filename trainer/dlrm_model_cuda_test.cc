// The model on the CUDA backend against the CPU model: a few training steps
// (ForwardBackward, then Adam) on the same batches, including a short last
// batch that shrinks the activations. Losses, parameter gradients, feature
// gradients and parameters are held to 1e-4 relative (cuBLAS sums in another
// order than OpenBLAS); predictions too. Skips, visibly, without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_cuda.h"
#include "trainer/dense_backend.h"
#include "trainer/dense_optimizer.h"
#include "trainer/dlrm_model.h"

namespace tessera {
namespace {

void ExpectClose(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // Relative to the element, with the array's scale as a floor for the
    // elements that are sums of cancelling terms.
    const double tol = 1e-4 * std::max(static_cast<double>(std::fabs(want[i])), 1e-2 * scale) + 1e-7;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && ++failures <= 5) {
      ADD_FAILURE() << what << " element " << i << ": GPU " << got[i] << ", CPU " << want[i];
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

struct TestBatch {
  int64_t size = 0;
  std::vector<float> dense, labels;
  std::vector<std::vector<float>> features;
  std::vector<const float*> pointers;
};

TestBatch MakeBatch(int64_t size, int num_dense, const std::vector<int>& dims, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  TestBatch b;
  b.size = size;
  b.dense.resize(size * num_dense);
  for (float& x : b.dense) x = u(*rng);
  for (int64_t i = 0; i < size; ++i) b.labels.push_back(u(*rng) > 0 ? 1.0f : 0.0f);
  for (int d : dims) {
    b.features.emplace_back(size * d);
    for (float& x : b.features.back()) x = u(*rng);
  }
  for (const auto& f : b.features) b.pointers.push_back(f.data());
  return b;
}

TEST(DlrmModelCudaTest, TrainsLikeTheCpuModel) {
  const std::string reason = kernels::NoCudaDeviceReason();
  if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
  auto backend = NewDenseBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();

  ModelConfig m;
  m.num_dense_features = 13;
  m.bottom_mlp = {64, 16};
  m.top_mlp = {32, 16, 1};
  const std::vector<int> dims = {16, 8, 16};
  DlrmModel cpu(m, dims, 42);
  auto gpu_or = DlrmModel::Create(m, dims, 42, backend->get());
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  DlrmModel& gpu = **gpu_or;
  ASSERT_TRUE(gpu.on_device());
  ASSERT_EQ(gpu.num_params(), cpu.num_params());
  StatusOr<std::vector<float>> initial = gpu.CopyParamsToHost();
  ASSERT_TRUE(initial.ok());
  EXPECT_TRUE(std::equal(initial->begin(), initial->end(), cpu.params().begin()));  // same init, bit for bit

  OptimizerSpec spec;
  spec.type = "adam";
  spec.lr = 0.01;
  auto cpu_opt = DenseOptimizer::Create(spec, cpu.num_params());
  auto gpu_opt = DenseOptimizer::Create(spec, gpu.num_params(), backend->get());
  ASSERT_TRUE(cpu_opt.ok() && gpu_opt.ok());

  std::mt19937 rng(3);
  for (int64_t size : {64, 64, 64, 17}) {
    SCOPED_TRACE(testing::Message() << "batch of " << size);
    const TestBatch b = MakeBatch(size, m.num_dense_features, dims, &rng);
    std::vector<std::vector<float>> cpu_d, gpu_d;
    StatusOr<double> cpu_loss = cpu.ForwardBackward(b.dense.data(), b.pointers, b.labels.data(), size, 1.0f / size,
                                                    &cpu_d);
    StatusOr<double> gpu_loss = gpu.ForwardBackward(b.dense.data(), b.pointers, b.labels.data(), size, 1.0f / size,
                                                    &gpu_d);
    ASSERT_TRUE(cpu_loss.ok() && gpu_loss.ok()) << gpu_loss.status();
    EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-4 * std::fabs(*cpu_loss));
    std::vector<float> gpu_grads(gpu.num_params());
    ASSERT_TRUE(backend.value()->CopyToHost(gpu.grads().data(), gpu.num_params(), gpu_grads.data()).ok());
    ExpectClose(gpu_grads, cpu.grads(), "grads");
    ASSERT_EQ(gpu_d.size(), cpu_d.size());
    for (size_t f = 0; f < cpu_d.size(); ++f) ExpectClose(gpu_d[f], cpu_d[f], "d_features " + std::to_string(f));

    ASSERT_TRUE(cpu_opt->Step(cpu.params(), cpu.grads()).ok());
    ASSERT_TRUE(gpu_opt->Step(gpu.params(), gpu.grads()).ok());
    StatusOr<std::vector<float>> params = gpu.CopyParamsToHost();
    ASSERT_TRUE(params.ok());
    ExpectClose(*params, cpu.params(), "params");

    std::vector<float> cpu_logits(size), gpu_logits(size);
    ASSERT_TRUE(cpu.Predict(b.dense.data(), b.pointers, size, cpu_logits.data()).ok());
    ASSERT_TRUE(gpu.Predict(b.dense.data(), b.pointers, size, gpu_logits.data()).ok());
    ExpectClose(gpu_logits, cpu_logits, "logits");
  }

  // The GPU model's parameters load back into a CPU model (a checkpoint).
  StatusOr<std::vector<float>> params = gpu.CopyParamsToHost();
  ASSERT_TRUE(params.ok());
  DlrmModel restored(m, dims, 7);
  ASSERT_TRUE(restored.LoadParams(*params).ok());
  EXPECT_TRUE(std::equal(params->begin(), params->end(), restored.params().begin()));
}

}  // namespace
}  // namespace tessera
