// MemoryStore: a Store in this process's memory, for ranks that run as
// threads of one process (tests, single-process jobs). Any thread may call;
// a Get waits for a Set from another thread. Values live until the store is
// destroyed, which no call may still be inside.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/store.h"

namespace tessera {

class MemoryStore final : public Store {
 public:
  Status Set(const std::string& key, std::string value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable set_;                 // notified by every Set
  std::map<std::string, std::string> values_;   // GUARDED_BY(mu_)
};

}  // namespace tessera
