// Embedding-bag forward and backward on a CUDA device: the CPU kernels'
// contract (kernels/embedding_bag.h, same argument structs) with every pointer
// in the structs a device pointer (row_ptrs: a device array of device
// pointers), run on the current device, asynchronously on `stream`.
//
// Rounding. Per output element both kernels do what the CPU does: one fmaf per
// id in increasing id order, from 0, then the bag's scale (the arithmetic of
// kernels/embedding_bag_math.h). So:
//   forward   equals the CPU bit for bit (each element is summed by one thread
//             over its bag's ids in order).
//   backward  equals the CPU bit for bit for every row reached by at most
//             kBackwardSegmentIds ids. A row reached more often is summed in
//             chunks of kBackwardSegmentIds ids (each in increasing id order)
//             whose sums are then added in chunk order: deterministic (the same
//             inputs give the same bits on any run and launch), but rounded
//             differently from the CPU's single running sum.
// Neither kernel uses atomics.
//
// Errors: a Status for a bad launch or an earlier asynchronous fault reported
// at launch; a fault inside the kernels shows up at the next synchronization.
// The caller validates the layout (offsets, index ranges) as for the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/device_cuda.h"
#include "kernels/embedding_bag.h"

namespace tessera::kernels {

// Ids of one row summed in one sequence before chunk sums are combined.
constexpr int kBackwardSegmentIds = 256;

// Index is int32_t or int64_t. Fully overwrites args.out.
template <typename Index>
Status EmbeddingBagForwardCuda(const EmbeddingBagForwardArgs<Index>& args, cudaStream_t stream);

// Fully overwrites args.grad_rows. num_ids must equal offsets[num_bags] (the
// offsets live on the device; passing the count avoids a synchronization).
// REQUIRES: num_ids < 2^31. `scratch` is grown as needed and may be reused
// by later calls on the same stream (Reserve says when it reallocates).
// Sort-based: (index, position) pairs are radix-sorted by index (stable, so a
// row's ids stay in increasing position), then each row's ids are summed.
template <typename Index>
Status EmbeddingBagBackwardCuda(const EmbeddingBagBackwardArgs<Index>& args, int64_t num_ids, DeviceBuffer* scratch,
                                cudaStream_t stream);

}  // namespace tessera::kernels
