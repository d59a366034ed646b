// The flags that set how many connections a server role's port takes
// (--max_connections_per_peer, --max_connections) and how long one may take
// to handshake (--handshake_timeout_ms): the master's and the
// parameter server's, defined once for both mains.
#pragma once

#include "common/rpc_server.h"

namespace tessera {

ConnectionLimits ConnectionLimitsFromFlags();

}  // namespace tessera
