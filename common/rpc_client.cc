#include "common/rpc_client.h"

#include <cstring>
#include <future>
#include <random>
#include <set>
#include <sstream>

#include <glog/logging.h>

#include "common/net_address.h"
#include "common/recent_replies.h"
#include "common/rpc_internal.h"
#include "common/zmq_transport.h"

namespace tessera {

RpcFuture::RpcFuture() : state_(std::make_shared<State>()) {}

StatusOr<Message> RpcFuture::Wait() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [this] { return state_->result.has_value(); });
  StatusOr<Message> r = std::move(*state_->result);
  state_->result.reset();
  return r;
}

bool RpcFuture::WaitFor(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [this] { return state_->result.has_value(); });
}

bool RpcFuture::Ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->result.has_value();
}

StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(std::shared_ptr<const JobKeys> keys) {
  std::unique_ptr<RpcClient> c(new RpcClient());
  c->keys_ = std::move(keys);
  // 16 random bytes; a routing id may not start with a zero byte (libzmq
  // keeps those for the ids it makes itself).
  std::random_device random;
  c->routing_id_.resize(16);
  for (char& b : c->routing_id_) b = static_cast<char>(random() & 0xff);
  if (c->routing_id_[0] == 0) c->routing_id_[0] = 1;
  try {
    c->context_ = std::make_unique<zmq::context_t>(1);
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("zmq context: ") + e.what());
  }
  c->wakeup_ = std::make_unique<rpc_internal::Wakeup>();
  c->io_thread_ = std::thread(&RpcClient::IoLoop, c.get());
  return c;
}

RpcClient::~RpcClient() {
  stop_ = true;
  wakeup_->Signal();
  if (io_thread_.joinable()) io_thread_.join();
  for (size_t peer = 0; peer < sockets_.size(); ++peer) CloseLink(static_cast<int>(peer));
  context_.reset();
}

void RpcClient::CloseLink(int peer) {
  // Monitoring stops before either socket closes. libzmq sends a socket's
  // events from its I/O thread with a blocking send: an event raised once
  // the reading end is gone (the server closing the connection just as we
  // close ours) would block that thread for good, and with it every other
  // connection of this client (libzmq issue 3575).
  if (sockets_[peer]) (void)zmq_socket_monitor(static_cast<void*>(*sockets_[peer]), nullptr, 0);
  sockets_[peer].reset();
  monitors_[peer].reset();
}

std::optional<std::chrono::steady_clock::time_point> RpcClient::DisconnectedSince(int peer) const {
  std::lock_guard<std::mutex> lock(links_mu_);
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return std::nullopt;
  return links_[peer].down_since;
}

StatusOr<int> RpcClient::Connect(const std::string& endpoint, Role server_role) {
  TESSERA_RETURN_IF_ERROR(CheckPeerEndpoint(endpoint));
  if (keys_ && keys_->public_key(server_role).empty()) {
    return Status::InvalidArgument(std::string("cannot connect to ") + endpoint + ": the job's keys have no " +
                                   RoleName(server_role) + ".public");
  }
  auto promise = std::make_shared<std::promise<StatusOr<int>>>();
  auto future = promise->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    connects_.push_back(ConnectRequest{endpoint, server_role, [promise](StatusOr<int> r) { promise->set_value(std::move(r)); }});
  }
  wakeup_->Signal();
  return future.get();
}

void RpcClient::CallAsync(int peer, Message&& request, std::chrono::milliseconds timeout, RpcCallback done) {
  request.header.request_id = next_request_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    outgoing_.push_back(Outgoing{peer, std::move(request), std::chrono::steady_clock::now() + timeout, std::move(done)});
  }
  wakeup_->Signal();
}

RpcFuture RpcClient::Call(int peer, Message&& request, std::chrono::milliseconds timeout) {
  RpcFuture f;
  auto state = f.state_;
  CallAsync(peer, std::move(request), timeout, [state](StatusOr<Message> r) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->result.emplace(std::move(r));
    }
    state->cv.notify_all();
  });
  return f;
}

StatusOr<Message> RpcClient::CallSync(int peer, Message&& request, std::chrono::milliseconds timeout) {
  return Call(peer, std::move(request), timeout).Wait();
}

void RpcClient::CancelCalls(int peer, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(Cancel{peer, why.ok() ? Status::Cancelled("call cancelled") : why, next_request_id_.load()});
  }
  wakeup_->Signal();
}

bool RpcClient::Refused(int peer) const {
  std::lock_guard<std::mutex> lock(links_mu_);
  return peer >= 0 && peer < static_cast<int>(links_.size()) && links_[peer].refused;
}

Status RpcClient::RefusedStatus(int peer) const {
  std::lock_guard<std::mutex> lock(links_mu_);
  if (links_[peer].too_many_connections) {
    return Status::ResourceExhausted("the server at " + links_[peer].endpoint +
                                     " refused this process's connection: too many connections from this host are "
                                     "open to it (its --max_connections_per_peer)");
  }
  return Status::PermissionDenied("the server at " + links_[peer].endpoint +
                                  " refused this process's CURVE handshake: not the job's keys (--keys)?");
}

void RpcClient::CountCalls(const std::deque<Outgoing>& waiting) {
  std::vector<std::pair<size_t, size_t>> counts(sockets_.size());
  for (const auto& [id, p] : pending_) {
    if (p.peer >= 0 && p.peer < static_cast<int>(counts.size())) ++counts[p.peer].first;
  }
  for (const Outgoing& o : waiting) {
    if (o.peer >= 0 && o.peer < static_cast<int>(counts.size())) ++counts[o.peer].second;
  }
  std::lock_guard<std::mutex> lock(links_mu_);
  for (size_t i = 0; i < counts.size() && i < links_.size(); ++i) {
    links_[i].in_flight = counts[i].first;
    links_[i].unsent = counts[i].second;
  }
}

std::string RpcClient::DescribeLink(int peer) const {
  std::lock_guard<std::mutex> lock(links_mu_);
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return "no such connection";
  const Link& l = links_[peer];
  std::ostringstream out;
  out << "connection to " << l.endpoint << ": ";
  if (l.refused) {
    out << (l.too_many_connections ? "refused (too many connections from this host)" : "refused (keys)");
  } else if (!l.ever_connected) {
    out << "never connected";
  } else if (l.down_since) {
    out << "down for "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - *l.down_since).count() << " s";
  } else {
    out << "up";
  }
  out << "; " << l.connections << " connection(s), " << l.disconnections << " drop(s), " << l.resent_calls
      << " call(s) sent again; " << l.in_flight << " call(s) sent and waiting for a reply, " << l.unsent
      << " not yet taken by the socket";
  return out.str();
}

void RpcClient::Disconnect(int peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    disconnects_.push_back(peer);
  }
  wakeup_->Signal();
}

void RpcClient::ReadMonitor(int peer) {
  for (;;) {
    // An event is two frames: 2 bytes of event id and 4 of value, then the
    // endpoint.
    zmq::message_t event, address;
    if (!monitors_[peer]->recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitors_[peer]->recv(address, zmq::recv_flags::dontwait);
    if (event.size() < sizeof(uint16_t)) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    if (event.size() >= sizeof(id) + sizeof(value)) {
      std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
    }
    std::lock_guard<std::mutex> lock(links_mu_);
    Link& link = links_[peer];
    // A server that holds another key than the one we expect of it cannot
    // read our hello and just closes the connection: seen here as TCP
    // connections that close before any handshake completes. A few in a row
    // (not one: a server may be stopping) are a refusal too.
    constexpr int kHandshakelessClosesToRefuse = 3;
    auto refuse = [&](const char* why) {
      if (!link.refused) {
        LOG(WARNING) << "the server at " << link.endpoint << " refused this process's connection (" << why << ")";
      }
      link.refused = true;
    };
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || (!keys_ && id == ZMQ_EVENT_CONNECTED)) {
      // With CURVE, a TCP connection is not yet a connection to the job.
      if (!link.ever_connected || link.down_since) ++link.connections;  // both events come without keys
      if (link.down_since) link.resend = true;
      link.ever_connected = true;
      link.down_since.reset();
      link.refused = false;
      link.too_many_connections = false;
      link.awaiting_handshake = false;
      link.handshakeless_closes = 0;
    } else if (id == ZMQ_EVENT_CONNECTED) {
      link.awaiting_handshake = true;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 500) {
      // What a server's ZAP handler answers when it holds its most
      // connections from this host (RpcServer::AnswerZap).
      refuse("too many connections from this host are open to it");
      link.too_many_connections = true;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      refuse("our key is not one of its job's");
      link.too_many_connections = false;
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      refuse("the handshake failed: a server of another job, or one without keys?");
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      if (link.awaiting_handshake && ++link.handshakeless_closes >= kHandshakelessClosesToRefuse) {
        refuse(
            "it closed every connection before the CURVE handshake: it does not hold the job's key for its role, or "
            "it holds as many connections as it takes (its --max_connections)");
      }
      link.awaiting_handshake = false;
      if (link.ever_connected && !link.down_since) {
        ++link.disconnections;
        link.down_since = std::chrono::steady_clock::now();
      }
    }
  }
}

void RpcClient::ResendAfterReset(int peer) {
  std::string endpoint;
  {
    std::lock_guard<std::mutex> lock(links_mu_);
    Link& link = links_[peer];
    if (!link.resend) return;
    link.resend = false;
    endpoint = link.endpoint;
  }
  // The request or its reply may have gone with the old connection: each
  // call still waiting goes again, under its own id (the server answers
  // each id once). One the socket cannot take now waits for its deadline.
  int resent = 0;
  for (auto& [id, p] : pending_) {
    if (p.peer != peer) continue;
    Message again = ShareFrames(p.request);
    StatusOr<bool> sent = TrySendMessage(*sockets_[peer], again);
    resent += sent.ok() && *sent;
  }
  if (resent > 0) {
    {
      std::lock_guard<std::mutex> lock(links_mu_);
      links_[peer].resent_calls += resent;
    }
    LOG(WARNING) << "the connection to " << endpoint << " was reset; " << resent
                 << " call(s) waiting for a reply sent again";
  }
}

void RpcClient::IoLoop() {
  std::vector<zmq::pollitem_t> items;
  std::deque<Outgoing> out, sends;
  std::deque<Outgoing> waiting;  // not yet taken by their socket
  std::set<int> blocked;         // peers whose socket took no call this round
  std::deque<ConnectRequest> connects;
  std::vector<Cancel> cancels;
  std::vector<int> disconnects;
  auto fail = [](RpcCallback& done, Status st) { done(StatusOr<Message>(std::move(st))); };

  while (!stop_.load()) {
    items.clear();
    items.push_back({nullptr, wakeup_->fd(), ZMQ_POLLIN, 0});
    // items: the wakeup, then each peer's socket, then each one's monitor, for
    // the peers there are now (`polled`; Connect may add more below). A
    // disconnected peer keeps its place, polled for nothing (fd -1).
    const size_t polled = sockets_.size();
    auto item = [](const std::unique_ptr<zmq::socket_t>& s) {
      return zmq::pollitem_t{s ? static_cast<void*>(*s) : nullptr, -1, static_cast<short>(s ? ZMQ_POLLIN : 0), 0};
    };
    for (auto& s : sockets_) items.push_back(item(s));
    for (auto& m : monitors_) items.push_back(item(m));
    // Wake at least every 20 ms to expire deadlines.
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(20));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      LOG(ERROR) << "zmq poll: " << e.what();
      break;
    }
    if (items[0].revents & ZMQ_POLLIN) wakeup_->Drain();

    {
      std::lock_guard<std::mutex> lock(mu_);
      out.swap(outgoing_);
      connects.swap(connects_);
      cancels.swap(cancels_);
      disconnects.swap(disconnects_);
    }
    for (ConnectRequest& c : connects) {
      try {
        auto s = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 0);
        s->set(zmq::sockopt::sndhwm, 100000);
        s->set(zmq::sockopt::rcvhwm, 100000);
        s->set(zmq::sockopt::routing_id, zmq::buffer(routing_id_));
        if (keys_) {
          s->set(zmq::sockopt::curve_serverkey, keys_->public_key(c.server_role));
          s->set(zmq::sockopt::curve_publickey, keys_->own_public());
          s->set(zmq::sockopt::curve_secretkey, keys_->own_secret());
        }
        // Its connection events come in on a PAIR of our own.
        const std::string monitor_address =
            "inproc://rpc-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
            std::to_string(sockets_.size());
        if (zmq_socket_monitor(static_cast<void*>(*s), monitor_address.c_str(),
                               ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
          throw zmq::error_t();
        }
        auto monitor = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
        monitor->set(zmq::sockopt::linger, 0);
        monitor->connect(monitor_address);
        s->connect(c.endpoint);
        sockets_.push_back(std::move(s));
        monitors_.push_back(std::move(monitor));
        {
          std::lock_guard<std::mutex> lock(links_mu_);
          links_.emplace_back();
          links_.back().endpoint = c.endpoint;
        }
        c.done(static_cast<int>(sockets_.size()) - 1);
      } catch (const zmq::error_t& e) {
        c.done(Status::InvalidArgument("cannot connect to " + c.endpoint + ": " + e.what()));
      }
    }
    connects.clear();
    // Calls still waiting for their connection go first, in order, and a
    // peer's later calls queue behind its waiting ones.
    for (Outgoing& o : out) waiting.push_back(std::move(o));
    out.clear();
    sends.swap(waiting);
    blocked.clear();
    const auto send_time = std::chrono::steady_clock::now();
    for (Outgoing& o : sends) {
      if (o.peer < 0 || o.peer >= static_cast<int>(sockets_.size())) {
        fail(o.done, Status::InvalidArgument("no such peer " + std::to_string(o.peer)));
        continue;
      }
      if (!sockets_[o.peer]) {
        fail(o.done, Status::Cancelled("the connection was closed (Disconnect)"));
        continue;
      }
      if (Refused(o.peer)) {
        fail(o.done, RefusedStatus(o.peer));
        continue;
      }
      const uint64_t id = o.message.header.request_id;
      Message kept = ShareFrames(o.message);
      StatusOr<bool> sent = blocked.count(o.peer) ? StatusOr<bool>(false) : TrySendMessage(*sockets_[o.peer], o.message);
      if (!sent.ok()) {
        fail(o.done, sent.status());
        continue;
      }
      if (!*sent) {
        // No connection to send on yet (or a full queue): never block the
        // thread that serves every peer; try again until the deadline.
        if (o.deadline <= send_time) {
          std::string endpoint;
          {
            std::lock_guard<std::mutex> lock(links_mu_);
            endpoint = links_[o.peer].endpoint;
          }
          fail(o.done, Status::DeadlineExceeded("no connection to the server at " + endpoint +
                                                " took the request before the deadline"));
        } else {
          blocked.insert(o.peer);
          waiting.push_back(std::move(o));
        }
        continue;
      }
      pending_.emplace(id, Pending{o.deadline, std::move(o.done), o.peer, std::move(kept)});
    }
    sends.clear();
    // After the sends above: a call started before CancelCalls is cancelled
    // too, one started after it (a later id) is not, even when both were
    // queued by the time this loop ran.
    for (auto& [peer, why, before_id] : cancels) {
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (it->peer != peer || it->message.header.request_id >= before_id) {
          ++it;
          continue;
        }
        RpcCallback done = std::move(it->done);
        it = waiting.erase(it);
        fail(done, why);
      }
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.peer != peer || it->first >= before_id) {
          ++it;
          continue;
        }
        RpcCallback done = std::move(it->second.done);
        it = pending_.erase(it);
        fail(done, why);
      }
    }
    cancels.clear();
    for (int peer : disconnects) {
      if (peer < 0 || peer >= static_cast<int>(sockets_.size()) || !sockets_[peer]) continue;
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (it->peer != peer) {
          ++it;
          continue;
        }
        RpcCallback done = std::move(it->done);
        it = waiting.erase(it);
        fail(done, Status::Cancelled("the connection was closed (Disconnect)"));
      }
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.peer != peer) {
          ++it;
          continue;
        }
        RpcCallback done = std::move(it->second.done);
        it = pending_.erase(it);
        fail(done, Status::Cancelled("the connection was closed (Disconnect)"));
      }
      CloseLink(peer);
    }
    disconnects.clear();

    for (size_t i = 0; i < polled; ++i) {
      if (!sockets_[i] || !(items[i + 1].revents & ZMQ_POLLIN)) continue;
      for (;;) {
        Message m;
        Status st = RecvMessage(*sockets_[i], nullptr, &m);
        if (st.code() == StatusCode::kNotFound) break;
        auto it = pending_.find(m.header.request_id);
        if (it == pending_.end()) {
          VLOG(1) << "reply to unknown or expired request " << m.header.request_id;
          continue;
        }
        RpcCallback done = std::move(it->second.done);
        pending_.erase(it);
        if (!st.ok()) {
          fail(done, st.WithContext("malformed reply"));
        } else if (m.header.status != StatusCode::kOk) {
          fail(done, StatusFromReply(m));
        } else {
          done(std::move(m));
        }
      }
    }

    const size_t first_monitor = 1 + polled;
    for (size_t i = 0; i < polled; ++i) {
      if (!monitors_[i] || !(items[first_monitor + i].revents & ZMQ_POLLIN)) continue;
      ReadMonitor(static_cast<int>(i));
      ResendAfterReset(static_cast<int>(i));
      if (!Refused(static_cast<int>(i))) continue;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.peer != static_cast<int>(i)) {
          ++it;
          continue;
        }
        RpcCallback done = std::move(it->second.done);
        it = pending_.erase(it);
        fail(done, RefusedStatus(static_cast<int>(i)));
      }
    }

    CountCalls(waiting);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        RpcCallback done = std::move(it->second.done);
        it = pending_.erase(it);
        fail(done, Status::DeadlineExceeded("no reply before the deadline"));
      } else {
        ++it;
      }
    }
  }

  // Nothing is left waiting forever.
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(outgoing_);
    connects.swap(connects_);
  }
  for (Outgoing& o : waiting) fail(o.done, Status::Cancelled("client shut down"));
  for (Outgoing& o : out) fail(o.done, Status::Cancelled("client shut down"));
  for (ConnectRequest& c : connects) c.done(Status::Cancelled("client shut down"));
  for (auto& [id, p] : pending_) fail(p.done, Status::Cancelled("client shut down"));
  pending_.clear();
}

}  // namespace tessera
