#include "common/connection_flags.h"

#include <gflags/gflags.h>

DEFINE_int64(max_connections_per_peer, 256,
             "Connections one host may hold open to this process's port; one more is refused in its handshake "
             "(its client reports RESOURCE_EXHAUSTED). 0: no limit");
DEFINE_int64(max_connections, -1,
             "Connections this process's port holds in all; one more is closed as it is accepted (-1: half the "
             "process's file descriptors, at most 4096; 0: no limit)");

DEFINE_int64(handshake_timeout_ms, 10000,
             "A connection to this process's port that has not finished its handshake this long after it was "
             "accepted is closed, so connections that never handshake hold their room no longer (0: no limit)");

namespace tessera {

ConnectionLimits ConnectionLimitsFromFlags() {
  ConnectionLimits limits;
  limits.per_peer = FLAGS_max_connections_per_peer;
  limits.total = FLAGS_max_connections;
  limits.handshake_timeout_ms = FLAGS_handshake_timeout_ms;
  return limits;
}

}  // namespace tessera
