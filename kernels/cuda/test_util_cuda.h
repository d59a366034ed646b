// Shared by the CUDA kernel tests: a fixture that skips, visibly, without a
// usable device, and copies between host vectors and device buffers.
// Test code: a failed copy or allocation is a broken test machine (CHECK).
#pragma once

#include <cuda_runtime.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoCudaDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
    CHECK_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) CHECK_EQ(cudaStreamDestroy(stream_), cudaSuccess);
  }
  void Sync() {
    const Status s = FromCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    CHECK(s.ok()) << s;
  }

  cudaStream_t stream_ = nullptr;
};

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(host.size() * sizeof(T));
  CHECK(b.ok()) << b.status();
  if (!host.empty()) {
    CHECK_EQ(cudaMemcpy(b->data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return std::move(b).value();
}

// `count` elements of T whose bytes are all 0xFF: for floats a NaN, so an
// element a kernel leaves unwritten fails the comparison.
template <typename T>
DeviceBuffer PoisonedDevice(size_t count) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(count * sizeof(T));
  CHECK(b.ok()) << b.status();
  CHECK_EQ(cudaMemset(b->data(), 0xFF, count * sizeof(T)), cudaSuccess);
  return std::move(b).value();
}

template <typename T>
std::vector<T> ToHost(const DeviceBuffer& device, size_t count) {
  std::vector<T> host(count);
  if (count > 0) {
    CHECK_EQ(cudaMemcpy(host.data(), device.data(), count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return host;
}

}  // namespace tessera::kernels
