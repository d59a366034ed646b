// Per-element arithmetic of the dense layers' pointwise ops, shared by the CPU
// kernels (kernels/cpu/dense_ops_cpu.cc) and the CUDA kernels. Compiles under
// nvcc: no std:: containers, no logging.
#pragma once

#include <cmath>

#include "kernels/hd.h"

namespace tessera::kernels {

TESSERA_HD float Relu(float x) { return x > 0.0f ? x : 0.0f; }

// Gradient through a ReLU given its output y: passes where y > 0.
TESSERA_HD float ReluGrad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// 1 / (1 + exp(-z)) without overflow: exp is only taken of a non-positive value.
TESSERA_HD float StableSigmoid(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
  const float e = expf(z);
  return e / (1.0f + e);
}

// BCE-with-logits of one element, -[y log s(z) + (1-y) log(1-s(z))], in the
// stable form max(z,0) - z*y + log(1 + exp(-|z|)).
TESSERA_HD float BceWithLogits(float z, float y) { return fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z))); }

// d BceWithLogits / dz, times scale.
TESSERA_HD float BceWithLogitsGrad(float z, float y, float scale) { return scale * (StableSigmoid(z) - y); }

}  // namespace tessera::kernels
