// Moving whole rows between a table of row slots on the device and a packed
// array: what a cache tier on the GPU does when rows come in from the host
// tier (scatter into their slots) and when dirty rows go back (gather out of
// them). Each is one launch, so a batch of misses costs one host-to-device
// copy of the packed rows plus one scatter, not a copy per row.
//
// Pure copies: the results equal the inputs bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"

namespace tessera::kernels {

// table[slots[i] * width + c] = packed[i * width + c] for i < n, c < width.
// All pointers are device pointers; slots must be distinct and < the table's
// slot count (the caller owns that invariant). Asynchronous on `stream`.
Status ScatterRowsCuda(float* table, int width, const int32_t* slots, int64_t n, const float* packed,
                       cudaStream_t stream);

// packed[i * width + c] = table[slots[i] * width + c].
Status GatherRowsCuda(const float* table, int width, const int32_t* slots, int64_t n, float* packed,
                      cudaStream_t stream);

}  // namespace tessera::kernels
