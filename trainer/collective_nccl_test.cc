// What can be checked of the NCCL collective on any machine: NCCL opens at
// run time (or says why not), and a bad rank is refused before anything is
// loaded. The allreduce itself needs GPUs: tests/gpu/run_device_checks.sh.
#include "trainer/collective_nccl.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>

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
  auto c = NewNcclCollective(o, nullptr, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
}

}  // namespace
}  // namespace tessera
