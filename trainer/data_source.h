// DataSource: where a trainer's examples come from (Criteo TSV, CSV or synthetic).
//
// Examples are addressed by their position in an epoch, so that the split of a
// global batch among trainers is pure arithmetic (trainer/data_split.h) and a
// job with W trainers and batch B sees, step for step, the same examples as a
// job with 1 trainer and batch W*B.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/batch.h"

namespace tessera {

class DataSource {
 public:
  virtual ~DataSource() = default;

  // Examples in one epoch.
  virtual int64_t num_examples() const = 0;
  // Dense features per example.
  virtual int num_dense() const = 0;
  // Feature names of the KeyedJaggedTensor it produces, in key order.
  virtual const std::vector<std::string>& feature_names() const = 0;

  // Overwrites *out with examples [begin, begin + count) of the epoch.
  // REQUIRES: 0 <= begin, count >= 0, begin + count <= num_examples().
  // Safe to call from one thread at a time.
  virtual Status Read(int64_t begin, int64_t count, Batch* out) = 0;
};

}  // namespace tessera
