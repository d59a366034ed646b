#include "common/rpc_client.h"

#include <cstring>
#include <future>

#include <glog/logging.h>

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

bool RpcFuture::Ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->result.has_value();
}

StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create() {
  std::unique_ptr<RpcClient> c(new RpcClient());
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
  monitors_.clear();
  sockets_.clear();
  context_.reset();
}

std::optional<std::chrono::steady_clock::time_point> RpcClient::DisconnectedSince(int peer) const {
  std::lock_guard<std::mutex> lock(links_mu_);
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return std::nullopt;
  return links_[peer].down_since;
}

StatusOr<int> RpcClient::Connect(const std::string& endpoint) {
  auto promise = std::make_shared<std::promise<StatusOr<int>>>();
  auto future = promise->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    connects_.push_back(ConnectRequest{endpoint, [promise](StatusOr<int> r) { promise->set_value(std::move(r)); }});
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

void RpcClient::ReadMonitor(int peer) {
  for (;;) {
    // An event is two frames: 2 bytes of event id and 4 of value, then the
    // endpoint.
    zmq::message_t event, address;
    if (!monitors_[peer]->recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitors_[peer]->recv(address, zmq::recv_flags::dontwait);
    if (event.size() < sizeof(uint16_t)) continue;
    uint16_t id = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    std::lock_guard<std::mutex> lock(links_mu_);
    Link& link = links_[peer];
    if (id == ZMQ_EVENT_CONNECTED) {
      link.ever_connected = true;
      link.down_since.reset();
    } else if (id == ZMQ_EVENT_DISCONNECTED && link.ever_connected && !link.down_since) {
      link.down_since = std::chrono::steady_clock::now();
    }
  }
}

void RpcClient::IoLoop() {
  std::vector<zmq::pollitem_t> items;
  std::deque<Outgoing> out;
  std::deque<ConnectRequest> connects;
  std::vector<Cancel> cancels;
  auto fail = [](RpcCallback& done, Status st) { done(StatusOr<Message>(std::move(st))); };

  while (!stop_.load()) {
    items.clear();
    items.push_back({nullptr, wakeup_->fd(), ZMQ_POLLIN, 0});
    for (auto& s : sockets_) items.push_back({static_cast<void*>(*s), 0, ZMQ_POLLIN, 0});
    for (auto& m : monitors_) items.push_back({static_cast<void*>(*m), 0, ZMQ_POLLIN, 0});
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
    }
    for (ConnectRequest& c : connects) {
      try {
        auto s = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 0);
        s->set(zmq::sockopt::sndhwm, 100000);
        s->set(zmq::sockopt::rcvhwm, 100000);
        // Its connection events come in on a PAIR of our own.
        const std::string monitor_address =
            "inproc://rpc-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
            std::to_string(sockets_.size());
        if (zmq_socket_monitor(static_cast<void*>(*s), monitor_address.c_str(),
                               ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
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
        }
        c.done(static_cast<int>(sockets_.size()) - 1);
      } catch (const zmq::error_t& e) {
        c.done(Status::InvalidArgument("cannot connect to " + c.endpoint + ": " + e.what()));
      }
    }
    connects.clear();
    for (Outgoing& o : out) {
      if (o.peer < 0 || o.peer >= static_cast<int>(sockets_.size())) {
        fail(o.done, Status::InvalidArgument("no such peer " + std::to_string(o.peer)));
        continue;
      }
      const uint64_t id = o.message.header.request_id;
      Status st = SendMessage(*sockets_[o.peer], nullptr, std::move(o.message));
      if (!st.ok()) {
        fail(o.done, st);
        continue;
      }
      pending_.emplace(id, Pending{o.deadline, std::move(o.done), o.peer});
    }
    out.clear();
    // After the sends above: a call started before CancelCalls is cancelled
    // too, one started after it (a later id) is not, even when both were
    // queued by the time this loop ran.
    for (auto& [peer, why, before_id] : cancels) {
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

    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (!(items.size() > i + 1 && (items[i + 1].revents & ZMQ_POLLIN))) continue;
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

    const size_t first_monitor = 1 + sockets_.size();
    for (size_t i = 0; i < monitors_.size() && first_monitor + i < items.size(); ++i) {
      if (items[first_monitor + i].revents & ZMQ_POLLIN) ReadMonitor(static_cast<int>(i));
    }

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
  for (Outgoing& o : out) fail(o.done, Status::Cancelled("client shut down"));
  for (ConnectRequest& c : connects) c.done(Status::Cancelled("client shut down"));
  for (auto& [id, p] : pending_) fail(p.done, Status::Cancelled("client shut down"));
  pending_.clear();
}

}  // namespace tessera
