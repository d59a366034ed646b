// The NCCL collective: GPU trainers allreduce their dense gradients in device
// memory. Built only with CUDA and NCCL's header (TESSERA_HAVE_NCCL); this
// header declares no NCCL or CUDA types, so callers build without them.
// libnccl.so.2 is opened at run time, the first time a job needs it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/store.h"
#include "trainer/collective.h"

namespace tessera {

struct NcclCollectiveOptions {
  int rank = 0;
  int world = 1;
  // CUDA device of this trainer; made current on the calling thread.
  int device = 0;
  // Key prefix of this job's NCCL unique id in the store: one communicator
  // per job, so the job's name belongs in it.
  std::string prefix = "nccl";
  // Bounds the rendezvous, the communicator's set-up and each allreduce: a
  // dead or stuck peer gives DeadlineExceeded / Unavailable, never a hang.
  std::chrono::milliseconds timeout{120000};
};

// The version of the libnccl.so.2 this process opens (NCCL_VERSION_CODE
// form, 22809 for 2.28.9), loading it on first use; Unavailable, saying why,
// where it cannot be loaded. Built only with NCCL's header.
StatusOr<int> NcclRuntimeVersion();

// Rank 0 makes the unique id and sets it in `store` (the master's store in a
// job, trainer/master_store.h); the others get it (the get waits for it, at
// most options.timeout), then all create the communicator together. `store`
// is used only during this call. Calls, including AllReduceSum on host
// memory (staged through page-locked and device buffers), come from one
// thread, with options.device current.
StatusOr<std::unique_ptr<Collective>> NewNcclCollective(const NcclCollectiveOptions& options, Store* store);

}  // namespace tessera
