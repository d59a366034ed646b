#include "trainer/bucketed_allreduce.h"

#include <glog/logging.h>

namespace tessera {

BucketedAllReduce::BucketedAllReduce(Collective* collective, int64_t bucket_floats)
    : collective_(collective), bucket_floats_(bucket_floats) {
  CHECK(collective_ != nullptr);
  CHECK_GE(bucket_floats_, 1);
  thread_ = std::thread([this] { Run(); });
}

BucketedAllReduce::~BucketedAllReduce() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void BucketedAllReduce::Begin(std::span<float> grads) {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(!in_step_) << "Begin() before the last step's Finish()";
  grads_ = grads;
  ready_from_ = pending_end_ = static_cast<int64_t>(grads.size());
  error_ = Status::OK();
  in_step_ = true;
}

void BucketedAllReduce::Ready(int64_t offset, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(in_step_) << "Ready() outside a step";
  CHECK_EQ(offset + count, ready_from_) << "gradient ranges must come from the end of the buffer, adjacent";
  CHECK_GE(offset, 0);
  ready_from_ = offset;
  if (pending_end_ - ready_from_ >= bucket_floats_) {
    Enqueue(grads_.subspan(ready_from_, pending_end_ - ready_from_));
    pending_end_ = ready_from_;
  }
}

Status BucketedAllReduce::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  CHECK(in_step_) << "Finish() outside a step";
  // Whatever the model did not report (a model that reports nothing) is
  // summed with the rest, so the whole buffer is always summed.
  if (pending_end_ > 0) Enqueue(grads_.subspan(0, pending_end_));
  ready_from_ = pending_end_ = 0;
  done_cv_.wait(lock, [&] { return in_flight_ == 0; });
  in_step_ = false;
  return error_;
}

int64_t BucketedAllReduce::buckets_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

void BucketedAllReduce::Enqueue(std::span<float> bucket) {
  queue_.push_back(bucket);
  ++in_flight_;
  work_cv_.notify_one();
}

void BucketedAllReduce::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) {
      // The owner is going away mid-step (its step failed): the buffers may
      // go with it, and the job fails without these sums.
      queue_.clear();
      in_flight_ = 0;
      done_cv_.notify_all();
      return;
    }
    const std::span<float> bucket = queue_.front();
    queue_.pop_front();
    if (error_.ok()) {
      ++sent_;
      lock.unlock();
      Status st = collective_->AllReduceSum(bucket);
      lock.lock();
      if (!st.ok() && error_.ok()) error_ = std::move(st);
    }
    if (--in_flight_ == 0) done_cv_.notify_all();
  }
}

}  // namespace tessera
