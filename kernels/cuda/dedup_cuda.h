// Id deduplication on a CUDA device, with the CPU IdDeduper's result
// (kernels/dedup.h): the distinct ids in first-seen order and the inverse
// index. The output is the same array, element for element, as the CPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {

// ids [n] (device) -> unique [n] (device; the first *num_unique entries are
// written), inverse [n] (device; inverse[i] is the position of ids[i] in
// unique), *num_unique (a device int32). Asynchronous on `stream`; copy
// num_unique to the host to learn the count. REQUIRES: n < 2^29.
// `scratch` is grown as needed (a hash table of 2n to 4n slots of 12 bytes,
// plus 12 bytes per id).
//
// How: a hash table keyed by id records, per distinct id, the smallest
// position it occurs at (atomicMin); positions that are their id's first are
// ranked by a prefix sum, which gives first-seen order whatever order the
// threads ran in. So the output is deterministic.
Status DedupIdsCuda(const int64_t* ids, int64_t n, int64_t* unique, int32_t* inverse, int32_t* num_unique,
                    DeviceBuffer* scratch, cudaStream_t stream);

}  // namespace tessera::kernels
