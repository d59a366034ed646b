#include "kernels/cuda/device_cuda.h"

#include <glog/logging.h>

#include <string>
#include <utility>

namespace tessera::kernels {
namespace {

// "cuda:N" -> N; -1 for anything else.
int ParseCudaIndex(const std::string& spec) {
  const std::string prefix = "cuda:";
  if (spec.size() <= prefix.size() || spec.size() > prefix.size() + 4 || spec.compare(0, prefix.size(), prefix) != 0) {
    return -1;
  }
  int n = 0;
  for (size_t i = prefix.size(); i < spec.size(); ++i) {
    if (spec[i] < '0' || spec[i] > '9') return -1;
    n = n * 10 + (spec[i] - '0');
  }
  return n;
}

#if defined(TESSERA_HAVE_CUDA)
// The oldest GPU the kernels are compiled for (kernels/CMakeLists.txt: sm_80).
constexpr int kMinComputeMajor = 8;

std::string CudaErrorText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// The number of devices, or why none can be used (then *count is 0).
std::string CountDevices(int* count) {
  *count = 0;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    return "no CUDA driver is installed (libcuda.so.1 not found)";
  }
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) {
    *count = 0;
    return "cudaGetDeviceCount failed: " + CudaErrorText(e);
  }
  if (*count == 0) return "the CUDA driver sees no device";
  return "";
}

// "" when device `index` can run the kernels, else why not.
std::string DeviceUnusableReason(int index) {
  int major = 0, minor = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index);
  if (e != cudaSuccess) return "cuda:" + std::to_string(index) + ": " + CudaErrorText(e);
  if (major < kMinComputeMajor) {
    return "cuda:" + std::to_string(index) + " has compute capability " + std::to_string(major) + "." +
           std::to_string(minor) + "; the kernels need " + std::to_string(kMinComputeMajor) + ".0 or newer";
  }
  return "";
}
#endif

// The reason device `index` cannot be used, "" when it can.
std::string UnusableReason(int index) {
#if defined(TESSERA_HAVE_CUDA)
  int count = 0;
  std::string reason = CountDevices(&count);
  if (!reason.empty()) return reason;
  if (index >= count) {
    return "cuda:" + std::to_string(index) + " is out of range: " + std::to_string(count) + " device(s) found";
  }
  return DeviceUnusableReason(index);
#else
  (void)index;
  return "this build has no CUDA support (built with TESSERA_WITH_CUDA=OFF or without nvcc)";
#endif
}

}  // namespace

#if defined(TESSERA_HAVE_CUDA)
Status FromCuda(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::OK();
  std::string message = what + ": " + CudaErrorText(error);
  switch (error) {
    case cudaErrorMemoryAllocation:
      return Status::ResourceExhausted(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorInvalidDevice:
      return Status::Unavailable(std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return Status::InvalidArgument(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}
#endif

StatusOr<int> ResolveDevice(const std::string& spec, std::string* fallback_reason) {
  if (fallback_reason != nullptr) fallback_reason->clear();
  if (spec == "cpu") return -1;
  if (spec == "auto") {
    const std::string reason = UnusableReason(0);
    if (reason.empty()) return 0;
    if (fallback_reason != nullptr) *fallback_reason = reason;
    return -1;
  }
  const int index = ParseCudaIndex(spec);
  if (index < 0) {
    return Status::InvalidArgument("bad device '" + spec + "': expected cpu, cuda:N or auto");
  }
  const std::string reason = UnusableReason(index);
  if (!reason.empty()) return Status::Unavailable("asked for " + spec + " but no CUDA device is usable: " + reason);
  return index;
}

std::string NoCudaDeviceReason() { return UnusableReason(0); }

StatusOr<int64_t> DeviceFreeBytes(int device) {
  const std::string reason = UnusableReason(device);
  if (!reason.empty()) return Status::Unavailable("cuda:" + std::to_string(device) + ": " + reason);
#if defined(TESSERA_HAVE_CUDA)
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device), "cudaSetDevice"));
  size_t free_bytes = 0, total_bytes = 0;
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  return static_cast<int64_t>(free_bytes);
#else
  return Status::Unavailable("this build has no CUDA support");
#endif
}

StatusOr<std::string> DevicePciBusId(int device) {
  const std::string reason = UnusableReason(device);
  if (!reason.empty()) return Status::Unavailable("cuda:" + std::to_string(device) + ": " + reason);
#if defined(TESSERA_HAVE_CUDA)
  char id[64] = {};
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaDeviceGetPCIBusId(id, sizeof(id), device), "cudaDeviceGetPCIBusId"));
  return std::string(id);
#else
  return Status::Unavailable("this build has no CUDA support");
#endif
}

// ---- DeviceBuffer

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  TESSERA_RETURN_IF_ERROR(b.Reserve(bytes));
  return b;
}

Status DeviceBuffer::Reserve(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return Status::OK();
#if defined(TESSERA_HAVE_CUDA)
  Release();
  void* p = nullptr;
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes),
                                   "cudaMalloc of " + std::to_string(bytes) + " bytes"));
  data_ = p;
  size_ = bytes;
  return Status::OK();
#else
  return Status::FailedPrecondition("device memory asked for in a build without CUDA");
#endif
}

void DeviceBuffer::Release() {
#if defined(TESSERA_HAVE_CUDA)
  if (data_ != nullptr) {
    const cudaError_t e = cudaFree(data_);
    // At process exit the runtime may be gone already; nothing to free then.
    LOG_IF(WARNING, e != cudaSuccess && e != cudaErrorCudartUnloading) << "cudaFree: " << CudaErrorText(e);
  }
#endif
  data_ = nullptr;
  size_ = 0;
}

// ---- PinnedBuffer

PinnedBuffer::~PinnedBuffer() { Release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer b;
  TESSERA_RETURN_IF_ERROR(b.Reserve(bytes));
  return b;
}

Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return Status::OK();
#if defined(TESSERA_HAVE_CUDA)
  Release();
  void* p = nullptr;
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaMallocHost(&p, bytes == 0 ? 1 : bytes),
                                   "cudaMallocHost of " + std::to_string(bytes) + " bytes"));
  data_ = p;
  size_ = bytes;
  return Status::OK();
#else
  (void)bytes;
  return Status::FailedPrecondition("pinned host memory asked for in a build without CUDA");
#endif
}

void PinnedBuffer::Release() {
#if defined(TESSERA_HAVE_CUDA)
  if (data_ != nullptr) {
    const cudaError_t e = cudaFreeHost(data_);
    LOG_IF(WARNING, e != cudaSuccess && e != cudaErrorCudartUnloading) << "cudaFreeHost: " << CudaErrorText(e);
  }
#endif
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tessera::kernels
