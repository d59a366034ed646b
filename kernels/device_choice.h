// What a role does with its --device flag (cpu | auto | cuda:N).
//
// The CUDA kernels exist (kernels/cuda/), but the parameter server's GPU tier
// and the trainer's cuBLAS + NCCL path are not wired into the roles yet. So
// "cuda:N" is refused at start with a message that says which of the two
// reasons applies (no usable GPU, or the GPU path not built yet) rather than
// quietly running on the CPU; "auto" runs on the CPU and logs why.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera::kernels {

// -1 (the CPU) or an error for the process to report and exit with.
// `role` names the process in messages ("parameter server", "trainer").
StatusOr<int> ChooseDevice(const std::string& spec, const std::string& role);

}  // namespace tessera::kernels
