// One thread per float: rows are row_width floats (a few dozen to a few
// hundred), so a grid-stride loop over n * width keeps every warp's accesses
// within one or two rows, coalesced on both sides.
#include "kernels/cuda/row_slots_cuda.h"

#include "kernels/cuda/device_cuda.h"

namespace tessera::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void ScatterRows(float* table, int width, const int32_t* slots, int64_t total, const float* packed) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / width;
    table[static_cast<int64_t>(slots[i]) * width + (k - i * width)] = packed[k];
  }
}

__global__ void GatherRows(const float* table, int width, const int32_t* slots, int64_t total, float* packed) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / width;
    packed[k] = table[static_cast<int64_t>(slots[i]) * width + (k - i * width)];
  }
}

int Blocks(int64_t total) {
  // Enough blocks to fill any current GPU several times over; the grid-stride
  // loop covers the rest.
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 65536 ? wanted : 65536);
}

Status CheckArgs(int width, int64_t n) {
  if (width < 1) return Status::InvalidArgument("row slots: width must be >= 1");
  if (n < 0) return Status::InvalidArgument("row slots: negative row count");
  return Status::OK();
}

}  // namespace

Status ScatterRowsCuda(float* table, int width, const int32_t* slots, int64_t n, const float* packed,
                       cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(CheckArgs(width, n));
  const int64_t total = n * width;
  if (total == 0) return Status::OK();
  ScatterRows<<<Blocks(total), kThreads, 0, stream>>>(table, width, slots, total, packed);
  return FromCuda(cudaGetLastError(), "ScatterRows launch");
}

Status GatherRowsCuda(const float* table, int width, const int32_t* slots, int64_t n, float* packed,
                      cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(CheckArgs(width, n));
  const int64_t total = n * width;
  if (total == 0) return Status::OK();
  GatherRows<<<Blocks(total), kThreads, 0, stream>>>(table, width, slots, total, packed);
  return FromCuda(cudaGetLastError(), "GatherRows launch");
}

}  // namespace tessera::kernels
