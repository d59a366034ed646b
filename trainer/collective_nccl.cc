// NCCL allreduce with a non-blocking communicator: every NCCL call returns at
// once and this file waits for it with a deadline, polling the
// communicator's error state, so a dead peer ends in an error and
// ncclCommAbort instead of a hang inside NCCL.
#include "trainer/collective_nccl.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include <glog/logging.h>

#include "kernels/cuda/device_cuda.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::DeviceBuffer;
using kernels::FromCuda;
using kernels::PinnedBuffer;

// NCCL's entry points, from libnccl.so.2 opened at run time: a trainer binary
// built with NCCL then starts (and trains on the CPU, or on one GPU through
// host memory) on a machine without it, and only a job that needs NCCL asks
// for it, failing with a clear error where it is missing.
struct NcclApi {
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommFinalize) CommFinalize;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclGetVersion) GetVersion;
};

// Set once, by LoadNccl, before anything below calls through it.
const NcclApi* nccl = nullptr;

Status LoadNccl() {
  static Status loaded = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return Status::Unavailable(std::string("NCCL is needed for GPU trainers with a GPU each but cannot be loaded (") +
                                 dlerror() + "); install it or put libnccl.so.2 on LD_LIBRARY_PATH");
    }
    static NcclApi api;
    std::string missing;
    auto bind = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    bind(&api.AllReduce, "ncclAllReduce");
    bind(&api.CommAbort, "ncclCommAbort");
    bind(&api.CommDestroy, "ncclCommDestroy");
    bind(&api.CommFinalize, "ncclCommFinalize");
    bind(&api.CommGetAsyncError, "ncclCommGetAsyncError");
    bind(&api.CommInitRankConfig, "ncclCommInitRankConfig");
    bind(&api.GetErrorString, "ncclGetErrorString");
    bind(&api.GetLastError, "ncclGetLastError");
    bind(&api.GetUniqueId, "ncclGetUniqueId");
    bind(&api.GetVersion, "ncclGetVersion");
    if (!missing.empty()) {
      return Status::Unavailable("libnccl.so.2 lacks " + missing + " (older than NCCL 2.14, which Tessera needs)");
    }
    nccl = &api;
    return Status::OK();
  }();
  return loaded;
}

// How often a wait looks at the communicator and the stream. Short: an
// allreduce of a dense model takes from tens of microseconds.
constexpr std::chrono::microseconds kPollInterval{20};

Status FromNccl(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  if (result == ncclSuccess || result == ncclInProgress) return Status::OK();
  std::string message = what + ": " + nccl->GetErrorString(result);
  const char* last = comm != nullptr ? nccl->GetLastError(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  if (result == ncclRemoteError || result == ncclSystemError) {
    return Status::Unavailable(message + " (a trainer died or its network failed?)");
  }
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) return Status::InvalidArgument(message);
  return Status::Internal(message);
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(const NcclCollectiveOptions& options, ncclComm_t comm, cudaStream_t stream)
      : options_(options), comm_(comm), stream_(stream) {}

  ~NcclCollective() override {
    if (comm_ != nullptr && !aborted_) {
      // Finalize flushes pending work; if a peer is gone it may never end,
      // so it gets the same deadline as everything else, then an abort.
      // WaitComm and Abort abort at most once; an aborted communicator is freed.
      Status st = FromNccl(nccl->CommFinalize(comm_), comm_, "ncclCommFinalize");
      if (st.ok()) st = WaitComm("finalizing the NCCL communicator");
      if (!st.ok()) {
        (void)Abort(st);
      } else {
        st = FromNccl(nccl->CommDestroy(comm_), comm_, "ncclCommDestroy");
        LOG_IF(WARNING, !st.ok()) << "NCCL collective: " << st;
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

  Status AllReduceSum(std::span<float> data) override {
    if (data.empty()) return Status::OK();
    const size_t bytes = data.size() * sizeof(float);
    TESSERA_RETURN_IF_ERROR(pinned_.Reserve(bytes));
    TESSERA_RETURN_IF_ERROR(staging_.Reserve(bytes));
    std::memcpy(pinned_.data(), data.data(), bytes);
    TESSERA_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(staging_.data(), pinned_.data(), bytes, cudaMemcpyHostToDevice, stream_), "allreduce: upload"));
    TESSERA_RETURN_IF_ERROR(AllReduceSumDevice(staging_.as<float>(), static_cast<int64_t>(data.size())));
    TESSERA_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(pinned_.data(), staging_.data(), bytes, cudaMemcpyDeviceToHost, stream_),
        "allreduce: download"));
    TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(stream_), "allreduce: cudaStreamSynchronize"));
    std::memcpy(data.data(), pinned_.data(), bytes);
    return Status::OK();
  }

  Status AllReduceSumDevice(float* data, int64_t n) override {
    if (aborted_) return Status::FailedPrecondition("the NCCL communicator was aborted after an earlier failure");
    if (n <= 0) return Status::OK();
    // The caller's work on `data` (the gradients) is complete: the dense
    // backend waits before ForwardBackward returns.
    TESSERA_RETURN_IF_ERROR(
        FromNccl(nccl->AllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_), comm_,
                 "ncclAllReduce"));
    TESSERA_RETURN_IF_ERROR(WaitComm("enqueueing the NCCL allreduce"));
    return WaitStream();
  }

  // Waits until the communicator has finished its pending call, at most the
  // timeout; aborts it on failure, so no NCCL work is left waiting on a peer.
  Status WaitComm(const std::string& what) {
    const auto deadline = Clock::now() + options_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      Status st = FromNccl(nccl->CommGetAsyncError(comm_, &state), comm_, "ncclCommGetAsyncError");
      if (st.ok()) st = FromNccl(state, comm_, what);
      if (!st.ok()) return Abort(st);
      if (state == ncclSuccess) return Status::OK();
      if (Clock::now() > deadline) {
        return Abort(Status::DeadlineExceeded(what + ": no progress in " + std::to_string(options_.timeout.count()) +
                                              " ms (a trainer died or hangs?)"));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  // Waits for the stream, watching the communicator meanwhile: a collective
  // waiting on a dead peer never completes by itself.
  Status WaitStream() {
    const auto deadline = Clock::now() + options_.timeout;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::OK();
      if (e != cudaErrorNotReady) return Abort(FromCuda(e, "NCCL allreduce"));
      ncclResult_t state = ncclSuccess;
      Status st = FromNccl(nccl->CommGetAsyncError(comm_, &state), comm_, "ncclCommGetAsyncError");
      if (st.ok()) st = FromNccl(state, comm_, "NCCL allreduce");
      if (!st.ok()) return Abort(st);
      if (Clock::now() > deadline) {
        return Abort(Status::DeadlineExceeded("NCCL allreduce did not finish in " +
                                              std::to_string(options_.timeout.count()) +
                                              " ms (a trainer died or hangs?)"));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  Status Abort(const Status& why) {
    if (!aborted_) {
      LOG(ERROR) << "NCCL collective, rank " << options_.rank << ": " << why << "; aborting the communicator";
      nccl->CommAbort(comm_);
      aborted_ = true;
    }
    return why;
  }

  NcclCollectiveOptions options_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool aborted_ = false;
  PinnedBuffer pinned_;   // host data of AllReduceSum
  DeviceBuffer staging_;  // its device copy
};

StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclCollectiveOptions& options, Store* store) {
  const std::string key = options.prefix + "/unique_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    TESSERA_RETURN_IF_ERROR(FromNccl(nccl->GetUniqueId(&id), nullptr, "ncclGetUniqueId"));
    TESSERA_RETURN_IF_ERROR(store->Set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
    return id;
  }
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, store->Get(key, options.timeout));
  if (bytes.size() != sizeof(id)) {
    return Status::DataLoss("NCCL unique id under " + key + " has " + std::to_string(bytes.size()) +
                            " bytes, expected " + std::to_string(sizeof(id)) + " (another NCCL version?)");
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

}  // namespace

StatusOr<int> NcclRuntimeVersion() {
  TESSERA_RETURN_IF_ERROR(LoadNccl());
  int version = 0;
  TESSERA_RETURN_IF_ERROR(FromNccl(nccl->GetVersion(&version), nullptr, "ncclGetVersion"));
  return version;
}

StatusOr<std::unique_ptr<Collective>> NewNcclCollective(const NcclCollectiveOptions& options, Store* store) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return Status::InvalidArgument("NCCL collective: rank must be in [0, world)");
  }
  TESSERA_ASSIGN_OR_RETURN(const int version, NcclRuntimeVersion());
  TESSERA_RETURN_IF_ERROR(
      FromCuda(cudaSetDevice(options.device), "cudaSetDevice(" + std::to_string(options.device) + ")"));
  auto id = ExchangeUniqueId(options, store);
  if (!id.ok()) return id.status().WithContext("NCCL rendezvous");

  cudaStream_t stream = nullptr;
  TESSERA_RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t init = nccl->CommInitRankConfig(&comm, options.world, *id, options.rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    const Status st = FromNccl(init, comm, "ncclCommInitRankConfig");
    if (comm != nullptr) nccl->CommAbort(comm);
    cudaStreamDestroy(stream);
    return st;
  }
  // From here the collective owns comm and stream; a failed wait aborts comm.
  auto collective = std::make_unique<NcclCollective>(options, comm, stream);
  TESSERA_RETURN_IF_ERROR(collective->WaitComm("creating the NCCL communicator (rank " +
                                               std::to_string(options.rank) + " of " +
                                               std::to_string(options.world) + ")"));
  LOG(INFO) << "NCCL collective: rank " << options.rank << " of " << options.world << " on cuda:" << options.device
            << " (NCCL " << version << ", built against " << NCCL_VERSION_CODE << ")";
  return std::unique_ptr<Collective>(std::move(collective));
}

}  // namespace tessera
