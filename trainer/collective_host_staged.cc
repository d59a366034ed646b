#include "trainer/collective_host_staged.h"

#include <cuda_runtime.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera {
namespace {

using kernels::FromCuda;
using kernels::PinnedBuffer;

class HostStagedCollective final : public Collective {
 public:
  explicit HostStagedCollective(std::unique_ptr<Collective> host) : host_(std::move(host)) {}

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  Status AllReduceSum(std::span<float> data) override { return host_->AllReduceSum(data); }

  Status AllReduceSumDevice(float* data, int64_t n) override {
    if (n == 0) return Status::OK();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    TESSERA_RETURN_IF_ERROR(staging_.Reserve(bytes));
    // The gradients are complete: the dense backend waits for its stream
    // before ForwardBackward returns. A copy from or to page-locked memory
    // returns when it is done, so the optimizer, next, sees the sums.
    TESSERA_RETURN_IF_ERROR(
        FromCuda(cudaMemcpy(staging_.data(), data, bytes, cudaMemcpyDeviceToHost), "gradients to the host"));
    TESSERA_RETURN_IF_ERROR(host_->AllReduceSum(std::span<float>(staging_.as<float>(), static_cast<size_t>(n))));
    return FromCuda(cudaMemcpy(data, staging_.data(), bytes, cudaMemcpyHostToDevice), "summed gradients back");
  }

 private:
  std::unique_ptr<Collective> host_;
  PinnedBuffer staging_;
};

}  // namespace

std::unique_ptr<Collective> StageDeviceSumsThroughHost(std::unique_ptr<Collective> host) {
  return std::make_unique<HostStagedCollective>(std::move(host));
}

}  // namespace tessera
