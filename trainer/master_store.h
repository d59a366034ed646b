// The master's key-value store (master/kv_store.h) seen from a trainer: how
// the collectives rendezvous (Gloo's store, NCCL's unique id). Only the
// master's address is needed.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/rpc_client.h"
#include "common/status.h"

namespace tessera {

// Sets key to the bytes. `master_peer` is the master's peer in `client`.
Status MasterStoreSet(RpcClient* client, int master_peer, const std::string& key, const void* data, size_t size,
                      std::chrono::milliseconds timeout);

// The key's bytes; waits until some trainer has set it, at most `timeout`
// (then DeadlineExceeded).
StatusOr<std::string> MasterStoreGet(RpcClient* client, int master_peer, const std::string& key,
                                     std::chrono::milliseconds timeout);

}  // namespace tessera
