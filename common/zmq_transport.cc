#include "common/zmq_transport.h"

#include <vector>

namespace tessera {

namespace {

// Sends m; with `dont_wait`, returns false (m untouched) when the socket
// cannot take its first part now. ZeroMQ queues a multipart message whole
// once its first part is in, so only the first part can find it full.
StatusOr<bool> Send(zmq::socket_t& socket, const std::string* routing_id, Message& m, bool dont_wait) {
  m.header.frame_count = static_cast<uint16_t>(m.frames.size());
  uint8_t header[kHeaderBytes];
  EncodeHeader(m.header, header);
  const zmq::send_flags first_flags = dont_wait ? zmq::send_flags::dontwait : zmq::send_flags::none;
  try {
    const bool more = !m.frames.empty();
    if (routing_id != nullptr) {
      if (!socket.send(zmq::buffer(*routing_id), zmq::send_flags::sndmore | first_flags)) return false;
      socket.send(zmq::buffer(header, kHeaderBytes), more ? zmq::send_flags::sndmore : zmq::send_flags::none);
    } else if (!socket.send(zmq::buffer(header, kHeaderBytes),
                            (more ? zmq::send_flags::sndmore : zmq::send_flags::none) | first_flags)) {
      return false;
    }
    for (size_t i = 0; i < m.frames.size(); ++i) {
      const bool last = i + 1 == m.frames.size();
      socket.send(m.frames[i], last ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("zmq send: ") + e.what());
  }
  m.frames.clear();
  return true;
}

}  // namespace

Status SendMessage(zmq::socket_t& socket, const std::string* routing_id, Message&& m) {
  return Send(socket, routing_id, m, false).status();
}

StatusOr<bool> TrySendMessage(zmq::socket_t& socket, Message& m) { return Send(socket, nullptr, m, true); }

Status RecvMessage(zmq::socket_t& socket, std::string* routing_id, Message* m, std::string* user_id) {
  std::vector<zmq::message_t> parts;
  try {
    zmq::message_t part;
    auto got = socket.recv(part, zmq::recv_flags::dontwait);
    if (!got) return Status::NotFound("no message waiting");
    parts.push_back(std::move(part));
    while (parts.back().more()) {
      zmq::message_t next;
      (void)socket.recv(next, zmq::recv_flags::none);  // the rest of a multipart is already here
      parts.push_back(std::move(next));
    }
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(std::string("zmq recv: ") + e.what());
  }
  size_t first = 0;
  if (routing_id != nullptr) {
    routing_id->assign(static_cast<const char*>(parts[0].data()), parts[0].size());
    first = 1;
  }
  if (user_id != nullptr) {
    // Every part carries its connection's metadata; the routing id, made by
    // the ROUTER itself, does not.
    const char* user = parts.size() > first ? zmq_msg_gets(parts[first].handle(), "User-Id") : nullptr;
    user_id->assign(user != nullptr ? user : "");
  }
  return DecodeMessage(std::move(parts), first, m);
}

}  // namespace tessera
