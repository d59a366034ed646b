// Which device a process computes on, and device memory that frees itself.
//
// Built in every configuration: with CUDA (TESSERA_HAVE_CUDA) it talks to the
// CUDA runtime; without it, every request for a GPU fails with a Status that
// says so, and "auto" resolves to the CPU. So a trainer or server can take a
// --device flag and fail cleanly on any machine.
//
// Conversions of CUDA errors to Status happen here (FromCuda) and nowhere else.
// Thread safety: the free functions may be called from any thread. A buffer is
// not thread-safe; it belongs to one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

#if defined(TESSERA_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace tessera::kernels {

#if defined(TESSERA_HAVE_CUDA)
// OK for cudaSuccess; otherwise "what: cudaErrorName: description" with a code
// that says what the caller can do: ResourceExhausted for out-of-memory,
// Unavailable when there is no usable device or driver, InvalidArgument for a
// bad value or launch configuration, Internal for the rest (a kernel fault
// leaves the context unusable; the process should stop using the device).
Status FromCuda(cudaError_t error, const std::string& what);
#endif

// The device index a spec names:
//   "cpu"     -> -1
//   "cuda:N"  -> N, or Unavailable "asked for cuda:N but no CUDA device is
//                usable: <reason>" (no driver, no device, N out of range, a
//                device older than the compute capability 8.0 the kernels are
//                built for, or a build without CUDA)
//   "auto"    -> the first usable GPU, or -1 with the reason there is none in
//                *fallback_reason (when not null) so the caller can log
//                "falling back to CPU: <reason>"; "" when a GPU was found.
// Anything else is InvalidArgument. Does not change the current device.
StatusOr<int> ResolveDevice(const std::string& spec, std::string* fallback_reason = nullptr);

// Why no CUDA device is usable, or "" when device 0 is. For tests and logs.
std::string NoCudaDeviceReason();

// Bytes of device `device`'s memory free now (cudaMemGetInfo), for sizing
// what a process takes at start. Unavailable without CUDA or that device.
// Makes `device` current on the calling thread.
StatusOr<int64_t> DeviceFreeBytes(int device);

// Which physical GPU `device` is (its PCI bus id, "0000:3b:00.0"): how
// processes on one machine find out they were given the same GPU.
// Unavailable without CUDA or that device.
StatusOr<std::string> DevicePciBusId(int device);

// cudaMalloc'd memory on the device that is current when it is allocated,
// freed on destruction. Move-only. Contents are uninitialized.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static StatusOr<DeviceBuffer> Allocate(size_t bytes);

  // Makes size() >= bytes, reallocating (contents lost) only when it must, so
  // a buffer used as per-call scratch allocates only when a call is larger
  // than any before. Reallocation frees the old memory with cudaFree, which
  // waits for the device, so work still using it is never cut short.
  Status Reserve(size_t bytes);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory (cudaMallocHost): what asynchronous copies between
// host and device need to overlap with computation. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  static StatusOr<PinnedBuffer> Allocate(size_t bytes);

  // Makes size() >= bytes, reallocating (contents lost) only when it must, as
  // DeviceBuffer::Reserve. The caller makes sure no copy still uses the
  // memory: unlike cudaFree, cudaFreeHost does not wait for one.
  Status Reserve(size_t bytes);

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera::kernels
