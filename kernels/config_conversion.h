// From the job config's plain specs (common/) to the kernels' own structs.
// Kept here so common/ never depends on kernels/ (DESIGN.md §2).
#pragma once

#include "common/job_config.h"
#include "common/status.h"
#include "kernels/embedding_bag.h"
#include "kernels/row_init.h"
#include "kernels/sparse_optimizer.h"

namespace tessera::kernels {

inline StatusOr<SparseOptimizerConfig> ToSparseOptimizerConfig(const OptimizerSpec& spec) {
  SparseOptimizerConfig c;
  if (!ParseSparseOptimizerKind(spec.type, &c.kind)) {
    return Status::InvalidArgument("unknown optimizer '" + spec.type + "'");
  }
  c.lr = static_cast<float>(spec.lr);
  c.eps = static_cast<float>(spec.eps);
  c.beta1 = static_cast<float>(spec.beta1);
  c.beta2 = static_cast<float>(spec.beta2);
  c.weight_decay = static_cast<float>(spec.weight_decay);
  c.initial_accumulator = static_cast<float>(spec.initial_accumulator);
  return c;
}

inline RowInitializer ToRowInitializer(const InitializerSpec& spec, uint64_t seed) {
  RowInitializer r;
  r.seed = seed;
  if (spec.type == "normal") {
    r.kind = InitKind::kNormal;
    r.a = static_cast<float>(spec.mean);
    r.b = static_cast<float>(spec.std);
  } else if (spec.type == "zeros") {
    r.kind = InitKind::kZeros;
  } else {
    r.kind = InitKind::kUniform;
    r.a = static_cast<float>(spec.low);
    r.b = static_cast<float>(spec.high);
  }
  return r;
}

inline Pooling ToPooling(PoolingType p) {
  switch (p) {
    case PoolingType::kSum: return Pooling::kSum;
    case PoolingType::kMean: return Pooling::kMean;
    case PoolingType::kNone: return Pooling::kNone;
  }
  return Pooling::kSum;
}

}  // namespace tessera::kernels
