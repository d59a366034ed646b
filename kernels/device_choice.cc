#include "kernels/device_choice.h"

#include <glog/logging.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {

StatusOr<int> ChooseDevice(const std::string& spec, const std::string& role, const std::string& gpu_path_missing) {
  std::string fallback;
  TESSERA_ASSIGN_OR_RETURN(int device, ResolveDevice(spec, &fallback));
  if (device < 0) {
    if (spec == "auto") LOG(WARNING) << role << ": --device auto: falling back to CPU: " << fallback;
    return -1;
  }
  if (!gpu_path_missing.empty()) {
    if (spec == "auto") {
      LOG(WARNING) << role << ": --device auto found cuda:" << device << " but runs on the CPU: " << gpu_path_missing;
      return -1;
    }
    return Status::Unavailable("--device " + spec + ": " + gpu_path_missing + "; use --device cpu or --device auto");
  }
  LOG(INFO) << role << ": running on cuda:" << device;
  return device;
}

}  // namespace tessera::kernels
