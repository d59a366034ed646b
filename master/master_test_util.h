// For tests: a master serving in this process (its job is never run, so
// only its handlers and rendezvous store answer) and a client connected to it.
#pragma once

#include <memory>

#include "common/job_config.h"
#include "common/rpc_client.h"
#include "common/status.h"
#include "master/master.h"

namespace tessera {

struct ServingMaster {
  std::unique_ptr<Master> master;
  std::unique_ptr<RpcClient> client;  // destroyed before the master
  int peer = -1;                      // the master in client
};

// With `keys` (the master's), the master and the client (with
// `client_keys`, which may be another role's) speak CURVE.
inline StatusOr<ServingMaster> StartServingMaster(const JobConfig& job,
                                                  std::shared_ptr<const JobKeys> keys = nullptr,
                                                  std::shared_ptr<const JobKeys> client_keys = nullptr) {
  ServingMaster s;
  MasterOptions options;
  options.keys = std::move(keys);
  TESSERA_ASSIGN_OR_RETURN(s.master, Master::Start(options, job));
  TESSERA_ASSIGN_OR_RETURN(s.client, RpcClient::Create(client_keys));
  TESSERA_ASSIGN_OR_RETURN(s.peer, s.client->Connect(s.master->endpoint(), Role::kMaster));
  return s;
}

}  // namespace tessera
