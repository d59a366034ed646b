#include "kernels/device_choice.h"

#include <gtest/gtest.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {
namespace {

TEST(ChooseDeviceTest, CpuAndAutoRunOnTheCpu) {
  auto cpu = ChooseDevice("cpu", "trainer");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, -1);
  // With or without a GPU: the roles' GPU paths are not built yet.
  auto automatic = ChooseDevice("auto", "trainer");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(*automatic, -1);
}

TEST(ChooseDeviceTest, ACudaDeviceIsRefusedWithTheReason) {
  auto gpu = ChooseDevice("cuda:0", "parameter server");
  ASSERT_FALSE(gpu.ok());
  if (NoCudaDeviceReason().empty()) {
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnimplemented) << gpu.status();
    EXPECT_NE(gpu.status().message().find("parameter server's GPU path is not built"), std::string::npos);
  } else {
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable) << gpu.status();
    EXPECT_NE(gpu.status().message().find("cuda:0"), std::string::npos) << gpu.status();
  }
}

TEST(ChooseDeviceTest, NonsenseIsAnInvalidArgument) {
  auto bad = ChooseDevice("tpu:0", "trainer");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
}

}  // namespace
}  // namespace tessera::kernels
