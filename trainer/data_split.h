// How the examples of a job are split among its trainers, step by step.
//
// A job has W trainers (world), each taking B examples per step (batch), over
// epochs of N examples (num_examples). Global batch g (steps count from 0
// across epochs) is the W*B examples starting at position g*W*B of the
// concatenated epochs, except that a global batch never straddles an epoch:
//   steps_per_epoch = ceil(N / (W*B))
//   step g is in epoch g / steps_per_epoch; within it, global batch
//   j = g % steps_per_epoch covers [j*W*B, min((j+1)*W*B, N)),
// so the last global batch of an epoch is short (N mod W*B examples, when that
// is not 0). Trainer r takes the r-th run of B examples of its global batch,
// clipped to the global batch, so in a short batch it may get fewer than B
// examples, or none.
//
// Hence a job with W trainers and batch B sees, step for step, exactly the
// examples of a job with 1 trainer and batch W*B, in the same order when the
// trainers' shares are concatenated by rank.
//
// Pure arithmetic, no state: any thread may call these functions.
#pragma once

#include <cstdint>

namespace tessera {

// One trainer's share of one step.
struct StepShare {
  int64_t epoch = 0;
  // First example of the share, as a position within the epoch. When count is
  // 0 it is the end of the global batch, so [begin, begin + count) is always a
  // valid (possibly empty) range of the epoch.
  int64_t begin = 0;
  // Examples this trainer takes, in [0, batch].
  int64_t count = 0;
  // Examples in the whole global batch (all trainers together), in
  // [1, world * batch]: what the trainer divides its summed loss by, so that
  // W trainers average over the same examples as one trainer would.
  int64_t global_count = 0;
};

// ceil(num_examples / (world * batch)).
// REQUIRES: world >= 1, batch >= 1, num_examples >= 1 (CHECKed).
int64_t StepsPerEpoch(int world, int64_t batch, int64_t num_examples);

// The share of trainer `rank` in global step `step`.
// REQUIRES: step >= 0, 0 <= rank < world, batch >= 1, num_examples >= 1
// (CHECKed).
StepShare ShareOfStep(int64_t step, int rank, int world, int64_t batch, int64_t num_examples);

}  // namespace tessera
