// Work on several shards of one server side by side: a snapshot, a restore
// or a migration of one shard is bound by one core's copying, and the job
// waits for the last shard.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tessera {

// Shards handled at once by one server. More threads than this gain nothing
// once the disk or the network, not the copy, is the bound.
inline constexpr size_t kShardThreads = 4;

// Runs fn(i) for every i in [0, n) on up to kShardThreads threads (this one
// included); the first error in index order, or OK.
inline Status ForEachShardInParallel(size_t n, const std::function<Status(size_t)>& fn) {
  std::vector<Status> results(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) results[i] = fn(i);
  };
  const size_t threads =
      std::min<size_t>({n, std::max<unsigned>(1, std::thread::hardware_concurrency()), kShardThreads});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const Status& st : results) TESSERA_RETURN_IF_ERROR(st);
  return Status::OK();
}

}  // namespace tessera
