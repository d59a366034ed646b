// Which backend a device index names. The CUDA one exists only in builds
// with CUDA (TESSERA_HAVE_CUDA); its factory is in dense_backend_cuda.cc.
#include "trainer/dense_backend.h"

#if defined(TESSERA_HAVE_CUDA)
#include "trainer/dense_backend_cuda.h"
#endif

namespace tessera {

StatusOr<std::unique_ptr<DenseBackend>> NewDenseBackend(int device) {
  if (device < 0) return NewCpuDenseBackend();
#if defined(TESSERA_HAVE_CUDA)
  return NewCudaDenseBackend(device);
#else
  return Status::Unavailable("asked for cuda:" + std::to_string(device) +
                             " but this trainer was built without CUDA (TESSERA_WITH_CUDA=OFF or no nvcc)");
#endif
}

}  // namespace tessera
