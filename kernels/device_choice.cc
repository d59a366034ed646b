#include "kernels/device_choice.h"

#include <glog/logging.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {

StatusOr<int> ChooseDevice(const std::string& spec, const std::string& role) {
  std::string fallback;
  TESSERA_ASSIGN_OR_RETURN(int device, ResolveDevice(spec, &fallback));
  if (device < 0) {
    if (spec == "auto") LOG(WARNING) << role << ": --device auto: falling back to CPU: " << fallback;
    return -1;
  }
  const std::string unbuilt = "the " + role + "'s GPU path is not built yet (the CUDA kernels exist, the " + role +
                              " does not use them)";
  if (spec == "auto") {
    LOG(WARNING) << role << ": --device auto found cuda:" << device << " but runs on the CPU: " << unbuilt;
    return -1;
  }
  return Status::Unimplemented("--device " + spec + ": " + unbuilt + "; use --device cpu or --device auto");
}

}  // namespace tessera::kernels
