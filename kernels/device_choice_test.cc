#include "kernels/device_choice.h"

#include <gtest/gtest.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {
namespace {

bool HaveGpu() { return NoCudaDeviceReason().empty(); }

TEST(ChooseDeviceTest, CpuRunsOnTheCpu) {
  auto cpu = ChooseDevice("cpu", "trainer");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, -1);
}

TEST(ChooseDeviceTest, AutoTakesTheFirstGpuOrFallsBack) {
  auto automatic = ChooseDevice("auto", "trainer");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(*automatic, HaveGpu() ? 0 : -1);
}

TEST(ChooseDeviceTest, AutoFallsBackWhereTheBuildLacksTheGpuPath) {
  auto automatic = ChooseDevice("auto", "trainer", "built without NCCL");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(*automatic, -1);
}

TEST(ChooseDeviceTest, ACudaDeviceRunsThereOrIsRefusedWithTheReason) {
  auto gpu = ChooseDevice("cuda:0", "parameter server");
  if (HaveGpu()) {
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(*gpu, 0);
  } else {
    ASSERT_FALSE(gpu.ok());
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable) << gpu.status();
    EXPECT_NE(gpu.status().message().find("cuda:0"), std::string::npos) << gpu.status();
  }
}

TEST(ChooseDeviceTest, ACudaDeviceIsRefusedWhereTheBuildLacksTheGpuPath) {
  auto gpu = ChooseDevice("cuda:0", "trainer", "built without NCCL");
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable) << gpu.status();
  // Whichever reason applies is named: no GPU, or the missing piece.
  const std::string expected = HaveGpu() ? "built without NCCL" : "cuda:0";
  EXPECT_NE(gpu.status().message().find(expected), std::string::npos) << gpu.status();
}

TEST(ChooseDeviceTest, AnOutOfRangeDeviceIsRefused) {
  auto gpu = ChooseDevice("cuda:4096", "trainer");
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable) << gpu.status();
}

TEST(ChooseDeviceTest, NonsenseIsAnInvalidArgument) {
  for (const char* spec : {"tpu:0", "cuda:", "cuda:-1", "cuda:x", ""}) {
    auto bad = ChooseDevice(spec, "trainer");
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << spec << ": " << bad.status();
  }
}

}  // namespace
}  // namespace tessera::kernels
