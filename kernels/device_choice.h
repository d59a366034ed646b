// What a role does with its --device flag (cpu | auto | cuda:N).
//
// "cuda:N" runs on GPU N, or fails at start with the reason it cannot (no
// usable GPU, or a build that lacks what the role's GPU path needs, such as
// NCCL for the trainer) rather than quietly running on the CPU. "auto" runs
// on the first usable GPU, or on the CPU with the reason in the log.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera::kernels {

// The device index (-1: the CPU) or an error for the process to report and
// exit with. `role` names the process in messages ("parameter server",
// "trainer"). `gpu_path_missing`: why this build cannot run the role on a GPU,
// or "" when it can.
StatusOr<int> ChooseDevice(const std::string& spec, const std::string& role,
                           const std::string& gpu_path_missing = "");

}  // namespace tessera::kernels
