// Moving a Message over a ZeroMQ socket. Only the thread that owns the socket
// may call these (DESIGN.md §5: one I/O thread owns the sockets).
#pragma once

#include <string>

#include <zmq.hpp>

#include "common/status.h"
#include "common/wire_format.h"

namespace tessera {

// Sends [routing_id] Header Frames... as one multipart message. The frames
// are moved out of `m`. routing_id is null on a DEALER.
Status SendMessage(zmq::socket_t& socket, const std::string* routing_id, Message&& m);

// The same on a DEALER without blocking: false, with `m` untouched, when the
// socket cannot take it now (no connection to send on, as a DEALER has
// after a refused handshake, or a full queue); the caller tries again later.
// A blocking send there would stall the thread that owns every socket.
StatusOr<bool> TrySendMessage(zmq::socket_t& socket, Message& m);

// Receives one multipart message without blocking. Returns NotFound when none
// is waiting. On a ROUTER, the first part is stored in *routing_id. A message
// whose header is malformed, or whose frame count disagrees with the header,
// is returned as InvalidArgument with *header holding what could be read
// (the request id, when the header was at least readable) so the caller can
// answer with an error reply. With `user_id`, also the sender's User-Id
// (what the ZAP handler said of its CURVE key; empty on a plain socket).
Status RecvMessage(zmq::socket_t& socket, std::string* routing_id, Message* m, std::string* user_id = nullptr);

}  // namespace tessera
