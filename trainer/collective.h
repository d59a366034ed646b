// Collective: how trainers keep their dense replicas identical (DESIGN.md §4
// step 4). Gloo on CPUs (trainer/gloo_collective.cc), NCCL on GPUs
// (trainer/collective_nccl.{h,cc}, built only with CUDA and NCCL).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/job_config.h"
#include "common/job_keys.h"
#include "common/status.h"
#include "common/store.h"

namespace tessera {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Sums `data` over all trainers, in place. Every trainer calls it with the
  // same size. Fails (never hangs forever) when a peer is gone.
  virtual Status AllReduceSum(std::span<float> data) = 0;
  // The same for n floats of device memory on the calling thread's current
  // CUDA device (a GPU trainer's gradients, summed in place without a trip
  // through the host). Done when it returns. Collectives over host memory
  // (Gloo) answer FailedPrecondition.
  virtual Status AllReduceSumDevice(float* data, int64_t n) = 0;
};

// A world of one: both sums leave the data as it is, wherever it is.
std::unique_ptr<Collective> NewLocalCollective();

struct GlooCollectiveOptions {
  int rank = 0;
  int world = 1;
  // Address this trainer's Gloo endpoints bind to and peers connect to.
  std::string host = "127.0.0.1";
  // Prefix of this job's keys in the store: one per job.
  std::string prefix = "gloo";
  // Bounds the rendezvous (each wait for a peer's key and connection) and
  // each allreduce: a missing or dead peer gives an error, never a hang.
  std::chrono::milliseconds timeout{120000};
  // The trainer role's 32-byte secret (JobKeys::own_secret_bytes) in a job
  // with keys: then every message of the sum is sealed
  // (trainer/collective_seal.h) and a peer without the job's keys can
  // neither read nor change it. Empty (--insecure): Gloo's own allreduce,
  // plain TCP.
  std::string seal_secret;
};

// Trainer `rank` of `world` in a job's generation `generation`: the job's
// collective timeout, and keys of that generation's own, so a rebuilt
// collective never reads the addresses of the one it replaces. Sealed with
// `keys`' trainer secret; plain when keys is null (--insecure).
GlooCollectiveOptions JobGlooOptions(const JobConfig& job, int64_t generation, int rank, int world, std::string host,
                                     const JobKeys* keys);

// The ranks meet through `store` (DESIGN.md §5): the master's store in a job
// (trainer/master_store.h), a MemoryStore shared by ranks that are threads of
// one process. `store` is used only during this call. A world of one needs
// no store (it may be null) and gives NewLocalCollective().
StatusOr<std::unique_ptr<Collective>> NewGlooCollective(const GlooCollectiveOptions& options, Store* store);

}  // namespace tessera
