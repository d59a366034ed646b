// MasterStore: the master's key-value store (master/kv_store.h) seen from a
// trainer, as a Store (common/store.h): how the collectives rendezvous
// (Gloo's addresses, NCCL's unique id) with nothing but the master's address.
#pragma once

#include <chrono>
#include <string>

#include "common/rpc_client.h"
#include "common/store.h"

namespace tessera {

class MasterStore final : public Store {
 public:
  // `master_peer` is the master's peer in `client`, which must outlive this
  // store. A Set is one RPC, answered at once, bounded by `set_timeout`.
  // Any thread may call (the RpcClient allows it).
  MasterStore(RpcClient* client, int master_peer, std::chrono::milliseconds set_timeout)
      : client_(client), master_peer_(master_peer), set_timeout_(set_timeout) {}

  Status Set(const std::string& key, std::string value) override;
  // The master answers when the key is set; after `timeout` the call ends
  // with DeadlineExceeded, naming the key.
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Adds `delta` to the counter at `key` (0 when unset) and returns the new
  // count, atomically at the master (torch.distributed's store.add).
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);

 private:
  RpcClient* client_;
  int master_peer_;
  std::chrono::milliseconds set_timeout_;
};

}  // namespace tessera
