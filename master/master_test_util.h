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

inline StatusOr<ServingMaster> StartServingMaster(const JobConfig& job) {
  ServingMaster s;
  TESSERA_ASSIGN_OR_RETURN(s.master, Master::Start(MasterOptions{}, job));
  TESSERA_ASSIGN_OR_RETURN(s.client, RpcClient::Create());
  TESSERA_ASSIGN_OR_RETURN(s.peer, s.client->Connect(s.master->endpoint()));
  return s;
}

}  // namespace tessera
