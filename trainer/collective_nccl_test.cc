// What can be checked of the NCCL collective on any machine: NCCL opens at
// run time (or says why not), and a bad rank is refused before anything is
// loaded. With one GPU, one rank runs the whole path except the traffic
// between GPUs (tests/gpu/run_device_checks.sh runs it there).
#include "trainer/collective_nccl.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "common/memory_store.h"
#include "kernels/cuda/device_cuda.h"

namespace tessera {
namespace {

TEST(NcclCollectiveTest, OpensNcclAtRunTimeOrSaysWhyNot) {
  StatusOr<int> version = NcclRuntimeVersion();
  if (version.ok()) {
    EXPECT_GE(*version, 21400) << "NCCL 2.14 or newer";  // ncclCommInitRankConfig, non-blocking
    std::cout << "[ info     ] NCCL " << *version << " loaded\n";
  } else {
    EXPECT_EQ(version.status().code(), StatusCode::kUnavailable) << version.status();
    EXPECT_NE(version.status().message().find("libnccl.so.2"), std::string::npos) << version.status();
    std::cout << "[ info     ] " << version.status() << "\n";
  }
  // Asking again gives the same answer (it is loaded once).
  StatusOr<int> again = NcclRuntimeVersion();
  EXPECT_EQ(again.ok(), version.ok());
}

TEST(NcclCollectiveTest, ABadRankIsRefused) {
  NcclCollectiveOptions o;
  o.world = 2;
  o.rank = 2;
  auto c = NewNcclCollective(o, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
}

// One rank on one GPU: NCCL opened at run time, the unique id through a
// store, a non-blocking communicator, allreduce of host memory (at
// two sizes, so its staging buffers grow) and of device memory, and the
// finalize in the destructor. The sum over one rank is the input itself.
// Without a GPU, creating the collective fails cleanly with the reason.
TEST(NcclCollectiveTest, OneRankRunsTheWholePathOnOneGpu) {
  StatusOr<int> version = NcclRuntimeVersion();
  if (!version.ok()) GTEST_SKIP() << version.status();

  MemoryStore store;
  NcclCollectiveOptions o;
  o.prefix = "nccl_test";
  o.timeout = std::chrono::milliseconds(60000);
  auto c = NewNcclCollective(o, &store);
  const std::string no_gpu = kernels::NoCudaDeviceReason();
  if (!no_gpu.empty()) {
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
    GTEST_SKIP() << "no usable GPU (" << no_gpu << "); creating the collective failed cleanly: " << c.status();
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->world(), 1);

  for (size_t n : {size_t{1000}, size_t{1} << 20}) {
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 997) * 0.5f - 3.0f;
    const std::vector<float> want = data;
    ASSERT_TRUE((*c)->AllReduceSum(data).ok());
    ASSERT_EQ(data, want) << n << " floats from host memory";
  }

  const size_t n = 4099;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = 1.0f / static_cast<float>(i + 1);
  auto device = kernels::DeviceBuffer::Allocate(n * sizeof(float));
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_EQ(cudaMemcpy(device->data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  Status st = (*c)->AllReduceSumDevice(device->as<float>(), static_cast<int64_t>(n));
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> back(n, -1.0f);
  ASSERT_EQ(cudaMemcpy(back.data(), device->data(), n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  c->reset();  // finalizes the communicator
}

}  // namespace
}  // namespace tessera
