// A host-memory collective (Gloo) for GPU trainers that cannot use NCCL:
// device sums are copied to the host, summed there, and copied back.
//
// NCCL refuses a communicator with two ranks on one GPU, and a job on one
// GPU (tests, small experiments, tests/gpu/run_device_checks.sh) has just
// that. Such a job still runs, with its dense gradients going through host
// memory: slower, the same sums. Built only with CUDA.
#pragma once

#include <memory>

#include "trainer/collective.h"

namespace tessera {

// Wraps `host` (a collective over host memory): AllReduceSumDevice copies the
// device array into page-locked memory, sums it with host->AllReduceSum, and
// copies it back, on the calling thread's current device.
std::unique_ptr<Collective> StageDeviceSumsThroughHost(std::unique_ptr<Collective> host);

}  // namespace tessera
