// RegisterWithMaster: how a parameter server or a trainer joins its job.
//
// The master may not be up yet when a role starts (scripts start them all
// at once, a scheduler in any order), so registration is retried until the
// master answers or `give_up` passes. An answer that refuses the member (a
// rank taken, a job that needs no more servers) ends it at once: retrying
// would not change it.
#pragma once

#include <chrono>

#include <nlohmann/json.hpp>

#include "common/rpc_client.h"
#include "common/status.h"

namespace tessera {

// Sends REGISTER `body` to `master_peer` (whose address is `master`, for the
// error message) and returns the master's reply: {rank, heartbeat_ms,
// peer_timeout_ms}.
StatusOr<nlohmann::json> RegisterWithMaster(RpcClient* client, int master_peer, const std::string& master,
                                            const nlohmann::json& body, std::chrono::milliseconds give_up);

}  // namespace tessera
