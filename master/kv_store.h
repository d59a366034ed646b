// KvStore: the master's rendezvous store (DESIGN.md §5). Trainers bootstrap
// their collectives through it (Gloo's Store interface, NCCL's unique id):
// set(key, bytes) and get(key), where a get of a key not yet set waits.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/rpc_server.h"

namespace tessera {

class KvStore {
 public:
  // Stores the value and answers every get waiting for the key.
  void Set(const std::string& key, std::string value);
  // Answers now with the value, or when the key is set. The caller's
  // deadline bounds the wait (a reply after it is dropped by the client).
  void Get(const std::string& key, Responder responder);
  // Adds `delta` to the counter at `key` (its value as decimal text, 0 when
  // unset), answers the gets waiting for it, and returns the new count; a
  // value that is not such a counter, or an overflow, is INVALID_ARGUMENT
  // and changes nothing.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Answers every waiting get with `status` (the job ended).
  void FailWaiters(const Status& status);

 private:
  // Sets the value and answers the gets waiting for it. REQUIRES: mu_ held.
  void StoreLocked(const std::string& key, std::string value);

  std::mutex mu_;
  std::map<std::string, std::string> values_;               // GUARDED_BY(mu_)
  std::map<std::string, std::vector<Responder>> waiters_;   // GUARDED_BY(mu_)
};

// Wire form: StoreSet := Header Key Value; StoreGet := Header Key;
// StoreGet reply := Header Value; StoreAdd := Header Key Delta (int64,
// little-endian), its reply := Header Value (the new count, decimal text).
// Key is UTF-8 text, Value raw bytes.

}  // namespace tessera
