// A single-process reference of a Tessera job, for the equivalence tests.
//
// It shares no code path with the distribution: no routing, no RPC, no
// allreduce, no shards, and not even the kernels — whole tables in plain
// vectors, naive loops in double precision for pooling, the MLP and the
// optimizers. What it shares is only what defines the job: the config, the
// data source, and the initial values (row initializer, DlrmModel's seeded
// replica).
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"

namespace tessera {

struct ReferenceResult {
  // Per table, [num_embeddings x (dim + optimizer state floats)], the same
  // row layout the servers store.
  std::vector<std::vector<float>> tables;
  std::vector<int> row_width;
  // Dense parameters in DlrmModel's flat layout.
  std::vector<float> dense;
  std::vector<double> losses;  // mean loss of each step's global batch
};

// Trains `steps` steps of batch `global_batch` on the job's data in one
// process. The job's tables must be small enough to hold whole.
StatusOr<ReferenceResult> TrainReference(const JobConfig& job, int64_t global_batch, int64_t steps);

}  // namespace tessera
