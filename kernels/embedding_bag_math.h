// Per-element arithmetic of the embedding bag, shared by the CPU kernels
// (kernels/cpu/embedding_bag_cpu.cc) and the CUDA kernels, so both round the
// same way. Compiles under nvcc: no std:: containers, no logging.
//
// Forward, for one output element of a bag with ids i in [begin, end):
//   acc = 0; for i: acc = EmbeddingBagAccumulate(acc, weight_i, row_i[j]);
//   out[j] = EmbeddingBagFinish(acc, BagScale(pooling, end - begin));
// Backward, for one element j of the row an id i points at:
//   s = EmbeddingBagGradScale(BagScale(...), weight_i);   (once per id)
//   grad_row[j] = EmbeddingBagAccumulate(grad_row[j], s, grad_out[bag][j]);
// fmaf keeps one rounding per id whatever the compiler's contraction setting;
// with a weight of 1 it equals acc + x exactly, so unweighted paths may add.
#pragma once

#include <cmath>

#include "kernels/hd.h"

namespace tessera::kernels {

// acc + weight * x with one rounding.
TESSERA_HD float EmbeddingBagAccumulate(float acc, float weight, float x) { return fmaf(weight, x, acc); }

// A bag's accumulated sum times its BagScale (1 for kSum, 1/len for kMean).
TESSERA_HD float EmbeddingBagFinish(float acc, float scale) { return acc * scale; }

// The factor an id's upstream gradient is multiplied by in the backward pass.
TESSERA_HD float EmbeddingBagGradScale(float bag_scale, float weight) { return bag_scale * weight; }

}  // namespace tessera::kernels
