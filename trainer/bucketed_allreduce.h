// Sums a step's dense gradients over the trainers while the backward pass is
// still computing them, as DDP's gradient buckets do: the model reports each
// layer's gradients as they become final (DlrmModel::BackwardHooks), adjacent
// ranges gather into buckets, and a thread of this object allreduces each
// bucket once it holds `bucket_floats` floats. Finish() sends the rest and
// waits. The collective is used by that thread only between the first
// Ready() of a step and Finish(); the caller may use it at other times.
//
// Every trainer must report the same ranges in the same order (the same
// model), so all cut the same buckets and their allreduces pair up. For two
// trainers the sums are bit-identical to one allreduce of the whole buffer
// (a + b == b + a); for more, Gloo's ring may add an element's terms in
// another order than with one allreduce, the same order on every trainer and
// in every run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>

#include "common/status.h"
#include "trainer/collective.h"

namespace tessera {

class BucketedAllReduce {
 public:
  // `collective` must outlive this object. bucket_floats >= 1.
  BucketedAllReduce(Collective* collective, int64_t bucket_floats);
  // Waits for the allreduce in flight, if any (bounded by the collective's
  // timeout); drops the buckets not yet started.
  ~BucketedAllReduce();
  BucketedAllReduce(const BucketedAllReduce&) = delete;
  BucketedAllReduce& operator=(const BucketedAllReduce&) = delete;

  // Starts a step over `grads`, which stays valid until Finish() returns.
  // REQUIRES: the last step was finished.
  void Begin(std::span<float> grads);
  // grads[offset, offset + count) is final. Ranges come from the end of the
  // buffer toward its start, each adjacent to the last.
  void Ready(int64_t offset, int64_t count);
  // Sends what is left and waits until every bucket of the step is summed.
  // The first error of the step's allreduces, if any; after one, the step's
  // later buckets are not sent (the job fails anyway, and a collective that
  // failed cannot pair up with its peers again).
  Status Finish();

  // Allreduces started since construction (for tests and metrics).
  int64_t buckets_sent() const;

 private:
  void Enqueue(std::span<float> bucket);  // REQUIRES: mu_ held
  void Run();

  Collective* const collective_;
  const int64_t bucket_floats_;
  std::span<float> grads_;
  int64_t ready_from_ = 0;  // [ready_from_, pending_end_) is final, not yet queued
  int64_t pending_end_ = 0;
  bool in_step_ = false;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::span<float>> queue_;
  int64_t in_flight_ = 0;  // queued or being summed
  int64_t sent_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera
