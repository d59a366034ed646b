// ResolveDevice and the buffers, on any machine: without a usable GPU (or
// without CUDA in the build) requests for one fail with a clear Status and
// "auto" falls back to the CPU with the reason; with one, cuda:0 resolves.
#include "kernels/cuda/device_cuda.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>

namespace tessera::kernels {
namespace {

bool HasGpu() { return NoCudaDeviceReason().empty(); }

TEST(ResolveDeviceTest, CpuIsMinusOne) {
  StatusOr<int> d = ResolveDevice("cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, -1);
}

TEST(DeviceFreeBytesTest, SaysHowMuchIsFreeOrWhyThereIsNoGpu) {
  StatusOr<int64_t> free_bytes = DeviceFreeBytes(0);
  if (HasGpu()) {
    ASSERT_TRUE(free_bytes.ok()) << free_bytes.status();
    EXPECT_GT(*free_bytes, 0);
  } else {
    ASSERT_FALSE(free_bytes.ok());
    EXPECT_EQ(free_bytes.status().code(), StatusCode::kUnavailable) << free_bytes.status();
  }
  EXPECT_FALSE(DeviceFreeBytes(4096).ok());
}

TEST(DevicePciBusIdTest, NamesTheGpuOrSaysWhyNot) {
  StatusOr<std::string> id = DevicePciBusId(0);
  if (HasGpu()) {
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_NE(id->find(':'), std::string::npos) << *id;
  } else {
    EXPECT_EQ(id.status().code(), StatusCode::kUnavailable) << id.status();
  }
}

TEST(ResolveDeviceTest, BadSpecsAreInvalidArguments) {
  for (const char* spec : {"", "gpu", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "CPU", "cuda:123456"}) {
    StatusOr<int> d = ResolveDevice(spec);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << spec << ": " << d.status();
  }
}

TEST(ResolveDeviceTest, AutoFallsBackWithAReasonOrPicksTheFirstGpu) {
  std::string reason = "stale";
  StatusOr<int> d = ResolveDevice("auto", &reason);
  ASSERT_TRUE(d.ok()) << d.status();
  if (HasGpu()) {
    EXPECT_EQ(*d, 0);
    EXPECT_EQ(reason, "");
  } else {
    EXPECT_EQ(*d, -1);
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(reason, NoCudaDeviceReason());
    std::cout << "[ info     ] auto -> cpu, falling back because: " << reason << "\n";
  }
  EXPECT_TRUE(ResolveDevice("auto").ok());  // the reason is optional
}

TEST(ResolveDeviceTest, Cuda0FailsCleanlyWithoutAGpu) {
  StatusOr<int> d = ResolveDevice("cuda:0");
  if (HasGpu()) {
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, 0);
    return;
  }
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  const std::string prefix = "asked for cuda:0 but no CUDA device is usable: ";
  EXPECT_EQ(d.status().message().substr(0, prefix.size()), prefix) << d.status();
  EXPECT_GT(d.status().message().size(), prefix.size()) << "no reason given";
  std::cout << "[ info     ] " << d.status() << "\n";
}

TEST(ResolveDeviceTest, IndexOutOfRangeFails) {
  StatusOr<int> d = ResolveDevice("cuda:999");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  if (HasGpu()) {
    EXPECT_NE(d.status().message().find("out of range"), std::string::npos) << d.status();
  }
}

TEST(DeviceBufferTest, AllocatesWithAGpuAndFailsCleanlyWithout) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(1 << 20);
  if (!HasGpu()) {
    EXPECT_FALSE(b.ok());
    std::cout << "[ info     ] without a GPU: " << b.status() << "\n";
    return;
  }
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), size_t{1} << 20);
  void* before = b->data();
  ASSERT_TRUE(b->Reserve(1000).ok());  // smaller: kept
  EXPECT_EQ(b->data(), before);
  ASSERT_TRUE(b->Reserve(2 << 20).ok());  // larger: reallocated
  EXPECT_GE(b->size(), size_t{2} << 20);
  DeviceBuffer moved = std::move(b).value();
  EXPECT_NE(moved.data(), nullptr);
}

TEST(PinnedBufferTest, AllocatesWithAGpuAndFailsCleanlyWithout) {
  StatusOr<PinnedBuffer> b = PinnedBuffer::Allocate(4096);
  if (!HasGpu()) {
    EXPECT_FALSE(b.ok());
    return;
  }
  ASSERT_TRUE(b.ok()) << b.status();
  b->as<char>()[4095] = 1;  // host-writable
  EXPECT_EQ(b->size(), 4096u);
  void* before = b->data();
  ASSERT_TRUE(b->Reserve(100).ok());  // smaller: kept
  EXPECT_EQ(b->data(), before);
  ASSERT_TRUE(b->Reserve(1 << 20).ok());  // larger: reallocated
  EXPECT_GE(b->size(), size_t{1} << 20);
  b->as<char>()[(1 << 20) - 1] = 1;
}

TEST(PinnedBufferTest, ReserveFailsCleanlyWithoutAGpu) {
  if (HasGpu()) GTEST_SKIP() << "a GPU is usable here";
  PinnedBuffer b;
  Status s = b.Reserve(4096);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace tessera::kernels
