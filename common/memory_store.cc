#include "common/memory_store.h"

namespace tessera {

Status MemoryStore::Set(const std::string& key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = std::move(value);
  }
  set_.notify_all();
  return Status::OK();
}

StatusOr<std::string> MemoryStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  // Every Set wakes every waiter; each looks for its own key again.
  if (!set_.wait_until(lock, deadline, [&] { return values_.contains(key); })) {
    return Status::DeadlineExceeded("store get " + key + ": not set within " + std::to_string(timeout.count()) +
                                    " ms");
  }
  return values_.at(key);
}

}  // namespace tessera
