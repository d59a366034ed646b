// The dense optimizer's step on a CUDA device: kernels/dense_optimizer_math.h
// applied to every element, device pointers, asynchronous on `stream`.
// The state layout is the CPU's (see dense_optimizer_math.h), so optimizer
// state moves between CPU and GPU trainers through checkpoints unchanged.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/dense_optimizer_math.h"

namespace tessera::kernels {

// params -= step(grads) for n elements; `state` holds
// DenseOptimizerStateSize(args.kind, n) floats (null for SGD).
// Fails only on a launch error.
Status DenseOptimizerStepCuda(const DenseStepArgs& args, float* params, const float* grads, float* state, int64_t n,
                              cudaStream_t stream);

}  // namespace tessera::kernels
