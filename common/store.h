// Store: the key-value store through which the ranks of a job meet before
// they can talk to each other (DESIGN.md §5, "Rendezvous"): Gloo's addresses,
// NCCL's unique id, which device each trainer is on. In a job it is the
// master's store (trainer/master_store.h); in tests and single-process use it
// is common/memory_store.h, so ranks can run as threads of one process.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace tessera {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`. A key set again takes the new value: a Get after
  // the Set returns it (keys are named so that a job sets each once; reusing
  // a store for a new job under the same names replaces the old values).
  virtual Status Set(const std::string& key, std::string value) = 0;

  // The value of `key`. Waits until some rank has set it, at most `timeout`;
  // then DeadlineExceeded naming the key. A zero timeout only looks.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace tessera
