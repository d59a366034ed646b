#include "trainer/data_split.h"

#include <glog/logging.h>

#include <algorithm>

namespace tessera {

int64_t StepsPerEpoch(int world, int64_t batch, int64_t num_examples) {
  CHECK_GE(world, 1);
  CHECK_GE(batch, 1);
  CHECK_GE(num_examples, 1);
  const int64_t global_batch = world * batch;
  return (num_examples + global_batch - 1) / global_batch;
}

StepShare ShareOfStep(int64_t step, int rank, int world, int64_t batch, int64_t num_examples) {
  CHECK_GE(step, 0);
  CHECK_GE(rank, 0);
  CHECK_LT(rank, world);
  const int64_t steps_per_epoch = StepsPerEpoch(world, batch, num_examples);
  const int64_t global_batch = world * batch;

  StepShare share;
  share.epoch = step / steps_per_epoch;
  const int64_t global_begin = (step % steps_per_epoch) * global_batch;
  const int64_t global_end = std::min(global_begin + global_batch, num_examples);
  share.global_count = global_end - global_begin;
  share.begin = std::min(global_begin + rank * batch, global_end);
  share.count = std::min(share.begin + batch, global_end) - share.begin;
  return share;
}

}  // namespace tessera
