// One trainer's share of a global batch.
#pragma once

#include <cstdint>
#include <vector>

#include "common/keyed_jagged_tensor.h"

namespace tessera {

struct Batch {
  // Position of the first example within its epoch.
  int64_t first_example = 0;
  int64_t size = 0;
  int num_dense = 0;
  std::vector<float> dense;   // [size x num_dense]
  std::vector<float> labels;  // [size], 0 or 1
  KeyedJaggedTensor sparse;   // batch_size == size

  void Clear() {
    first_example = 0;
    size = 0;
    dense.clear();
    labels.clear();
    sparse.Clear();
  }
};

}  // namespace tessera
