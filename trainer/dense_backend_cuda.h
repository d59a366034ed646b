// The CUDA dense backend's factory (built only with CUDA). Declares no CUDA
// types, so callers need no CUDA headers.
#pragma once

#include <memory>

#include "common/status.h"
#include "trainer/dense_backend.h"

namespace tessera {

// On CUDA device `device`, which becomes the calling thread's current device.
// The backend owns one stream, a cuBLAS handle and page-locked staging
// buffers. Unavailable when the device cannot be used.
StatusOr<std::unique_ptr<DenseBackend>> NewCudaDenseBackend(int device);

}  // namespace tessera
