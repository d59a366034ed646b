// RecentReplies: what a server remembers of the requests it was sent, so
// that a request a client sends again is served once.
//
// A client sends again the calls still waiting for their reply when its
// connection to the server was reset (RpcClient): the request, or its
// reply, may have been lost with the connection, or may not. So a copy
// that arrives while the first is being served is dropped (its reply goes
// to the client's routing id, which its new connection carries); one that
// arrives after it was answered gets the same reply again, when the reply
// was small enough to keep (control messages, pushes); a large one (a
// lookup's rows) is served again, which for a lookup only reads and
// replaces its own context. Keys are (routing id, request id): a client
// keeps its routing id across reconnects and never reuses a request id.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>

#include "common/wire_format.h"

namespace tessera {

class RecentReplies {
 public:
  enum class Seen {
    kNew,         // serve it
    kInProgress,  // the first copy is being served: drop this one
    kAnswered,    // send *reply (the kept reply) again
  };

  using Clock = std::chrono::steady_clock;

  // Keeps at most `max_entries` answered requests and `max_kept_bytes` of
  // their replies, each for at most `max_age` after it was answered;
  // replies larger than `max_reply_bytes` are not kept. A client sends a
  // call again as soon as its connection is back, so a reply is wanted again
  // within seconds of being sent, if ever: two minutes leave room for a long
  // reconnection, and keep what a steady stream of small requests (the
  // master's heartbeats) holds from growing for the 65,536 entries' hour.
  // `now` is for tests.
  explicit RecentReplies(size_t max_entries = 65536, size_t max_kept_bytes = size_t{64} << 20,
                         size_t max_reply_bytes = size_t{64} << 10,
                         Clock::duration max_age = std::chrono::minutes(2),
                         std::function<Clock::time_point()> now = Clock::now);

  // A request arrived.
  Seen Arrived(const std::string& routing_id, uint64_t request_id, Message* reply);
  // Its reply is about to be sent: `reply` is kept (its frames shared, not
  // copied) when small enough. Unknown requests are ignored.
  void Answered(const std::string& routing_id, uint64_t request_id, Message& reply);

  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    bool answered = false;
    bool kept = false;
    Message reply;
    size_t bytes = 0;
  };
  static std::string Key(const std::string& routing_id, uint64_t request_id);
  void Evict(Clock::time_point now);

  const size_t max_entries_, max_kept_bytes_, max_reply_bytes_;
  const Clock::duration max_age_;
  const std::function<Clock::time_point()> now_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::pair<Clock::time_point, std::string>> answered_;  // when, and whose; oldest first
  size_t kept_bytes_ = 0;
};

// A message whose frames share m's buffers (zmq_msg_copy); the header is
// copied.
Message ShareFrames(Message& m);

}  // namespace tessera
