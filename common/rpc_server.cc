#include "common/rpc_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <glog/logging.h>

#include "common/net_address.h"
#include "common/rpc_internal.h"
#include "common/zmq_transport.h"

namespace tessera {

using rpc_internal::OutgoingReply;
using rpc_internal::ReplySink;

Responder::Responder(std::shared_ptr<ReplySink> sink, std::string routing_id, Header request, Role peer_role,
                     std::chrono::steady_clock::time_point received, size_t request_bytes)
    : sink_(std::move(sink)),
      routing_id_(std::move(routing_id)),
      request_(request),
      peer_role_(peer_role),
      received_(received),
      request_bytes_(request_bytes) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    if (sink_) ReplyError(Status::Internal("request dropped by the server"));
    sink_ = std::move(other.sink_);
    routing_id_ = std::move(other.routing_id_);
    request_ = other.request_;
    peer_role_ = other.peer_role_;
    received_ = other.received_;
    request_bytes_ = other.request_bytes_;
  }
  return *this;
}

Responder::~Responder() {
  if (sink_) ReplyError(Status::Internal("request dropped by the server without a reply"));
}

void Responder::Reply(Message&& reply) {
  CHECK(sink_) << "Responder used twice";
  reply.header.op = request_.op;
  reply.header.request_id = request_.request_id;
  auto sink = std::move(sink_);
  sink->Record(request_, request_bytes_, reply, received_);
  sink->Push(std::move(routing_id_), std::move(reply));
}

void Responder::ReplyError(const Status& status) { Reply(MakeErrorReply(request_, status)); }

void Responder::ReplyOk() { Reply(MakeReply(request_)); }

Status CheckSender(const Responder& r, Role role, const std::string& bound, const std::string& who) {
  const std::string op = OpcodeName(r.request_header().op);
  if (r.peer_role() != Role::kNone && r.peer_role() != role) {
    return Status::PermissionDenied(op + " for " + who + " from a connection with the " + RoleName(r.peer_role()) +
                                    " key (" + RoleName(role) + " key expected): refused");
  }
  if (bound.empty() || r.routing_id() != bound) {
    return Status::PermissionDenied(op + " for " + who + " from a connection that is not " + who + "'s: refused");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(const RpcServerOptions& options, RpcHandler handler) {
  TESSERA_RETURN_IF_ERROR(CheckBindEndpoint(options.bind_address));
  if (options.worker_threads < 0) {
    return Status::InvalidArgument("a negative number of worker threads: " + std::to_string(options.worker_threads));
  }
  std::unique_ptr<RpcServer> s(new RpcServer());
  s->handler_ = std::move(handler);
  s->sink_ = std::make_shared<ReplySink>();
  s->keys_ = options.keys;
  s->connections_ = PeerConnections(
      static_cast<size_t>(std::max<int64_t>(0, options.connections.per_peer)),
      options.connections.total < 0 ? DefaultMaxConnections() : static_cast<size_t>(options.connections.total));
  try {
    s->context_ = std::make_unique<zmq::context_t>(1);
    // libzmq asks this context's ZAP handler about every handshake (the
    // client's key, and on a plain socket too, its address); the handler is
    // ours, answered on the I/O thread (AnswerZap).
    s->zap_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::rep);
    s->zap_->set(zmq::sockopt::linger, 0);
    s->zap_->bind("inproc://zeromq.zap.01");
    s->socket_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::router);
    s->socket_->set(zmq::sockopt::linger, 0);
    // A client that reconnects (a dropped TCP connection) comes back with
    // the routing id it had; the new connection replaces the old one, which
    // the server may not have noticed is gone.
    s->socket_->set(zmq::sockopt::router_handover, 1);
    s->socket_->set(zmq::sockopt::maxmsgsize, options.max_frame_bytes);
    s->socket_->set(zmq::sockopt::handshake_ivl,
                    static_cast<int>(std::clamp<int64_t>(options.connections.handshake_timeout_ms, 0,
                                                         std::numeric_limits<int>::max())));
    // A plain socket asks ZAP only when it has a domain.
    s->socket_->set(zmq::sockopt::zap_domain, "tessera");
    if (s->keys_) {
      s->socket_->set(zmq::sockopt::curve_server, 1);
      s->socket_->set(zmq::sockopt::curve_secretkey, s->keys_->own_secret());
    }
    // Large lookups and pushes: don't drop replies under a burst.
    s->socket_->set(zmq::sockopt::sndhwm, 100000);
    s->socket_->set(zmq::sockopt::rcvhwm, 100000);
    // Every connection's descriptor as it is accepted and as it closes,
    // watched before the socket listens so none is missed.
    const std::string monitor_address = "inproc://rpc-server-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(s.get()));
    if (zmq_socket_monitor(static_cast<void*>(*s->socket_), monitor_address.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return Status::Internal(std::string("cannot watch the server's connections: ") + zmq_strerror(zmq_errno()));
    }
    s->monitor_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::pair);
    s->monitor_->set(zmq::sockopt::linger, 0);
    s->monitor_->connect(monitor_address);
    s->socket_->bind(options.bind_address);
    s->endpoint_ = s->socket_->get(zmq::sockopt::last_endpoint);
    // Not a TCP endpoint (ipc://): no port, and no connection is closed for
    // the total limit (see ReadMonitor).
    const size_t colon = s->endpoint_.rfind(':');
    if (s->endpoint_.starts_with("tcp://") && colon != std::string::npos) {
      s->port_ = std::atoi(s->endpoint_.c_str() + colon + 1);
    }
  } catch (const zmq::error_t& e) {
    if (s->socket_) (void)zmq_socket_monitor(static_cast<void*>(*s->socket_), nullptr, 0);
    return Status::Unavailable("cannot listen on " + options.bind_address + ": " + e.what());
  }
  try {
    for (int i = 0; i < options.worker_threads; ++i) s->workers_.emplace_back(&RpcServer::WorkerLoop, s.get());
    s->io_thread_ = std::thread(&RpcServer::IoLoop, s.get());
  } catch (const std::system_error& e) {
    // Past the process's thread limit (a --threads of thousands): the
    // threads made so far are joined as s goes.
    return Status::ResourceExhausted("cannot start " + std::to_string(options.worker_threads) +
                                     " worker threads and an I/O thread: " + e.what());
  }
  return s;
}

RpcServer::~RpcServer() { Stop(); }

void RpcServer::Stop() {
  std::call_once(stop_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      workers_done_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    // Work that never reached a worker is answered, not dropped silently.
    for (Work& w : work_) {
      if (w.task) continue;
      sink_->Push(std::move(w.routing_id), MakeErrorReply(w.request.header, Status::Unavailable("server stopping")));
    }
    work_.clear();
    stop_ = true;
    sink_->wakeup.Signal();
    if (io_thread_.joinable()) io_thread_.join();
    {
      std::lock_guard<std::mutex> lock(sink_->mu);
      sink_->closed = true;
      sink_->queue.clear();
    }
    // Events stop before their reader closes: libzmq sends them with a
    // blocking send (docs/design.md §5, libzmq issue 3575).
    if (socket_) (void)zmq_socket_monitor(static_cast<void*>(*socket_), nullptr, 0);
    monitor_.reset();
    socket_.reset();
    zap_.reset();
    context_.reset();
  });
}

void RpcServer::WriteMetrics(PrometheusText* out, const MetricLabels& labels) const {
  for (size_t slot = 0; slot < rpc_internal::kOpSlots; ++slot) {
    const rpc_internal::OpStats& s = sink_->ops[slot];
    const LatencyHistogram::Snapshot latency = s.latency.Read();
    if (latency.count == 0) continue;
    MetricLabels l = labels;
    l.emplace_back("op", OpcodeName(static_cast<Opcode>(slot)));
    out->Counter("tessera_rpc_requests_total", "Requests answered, by opcode.", l, static_cast<double>(latency.count));
    out->Counter("tessera_rpc_errors_total", "Requests answered with an error.", l,
                 static_cast<double>(s.errors.load(std::memory_order_relaxed)));
    out->Counter("tessera_rpc_received_bytes_total", "Request bytes received (header and frames).", l,
                 static_cast<double>(s.bytes_in.load(std::memory_order_relaxed)));
    out->Counter("tessera_rpc_sent_bytes_total", "Reply bytes sent (header and frames).", l,
                 static_cast<double>(s.bytes_out.load(std::memory_order_relaxed)));
    LatencyHistogram::Write(out, "tessera_rpc_latency_seconds",
                            "From a request's arrival to its reply (a deferred sync lookup waits for the step).", l,
                            latency);
  }
  size_t waiting = 0, replies = 0;
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    waiting = work_.size();
  }
  {
    std::lock_guard<std::mutex> lock(sink_->mu);
    replies = sink_->queue.size();
  }
  out->Gauge("tessera_rpc_queued_requests", "Requests waiting for a worker thread.", labels,
             static_cast<double>(waiting));
  out->Gauge("tessera_rpc_queued_replies", "Replies waiting to be sent.", labels, static_cast<double>(replies));
  out->Gauge("tessera_rpc_open_connections", "TCP connections the server holds open.", labels,
             static_cast<double>(open_connections_.load(std::memory_order_relaxed)));
  MetricLabels per_peer = labels, total = labels;
  per_peer.emplace_back("limit", "per_peer");
  total.emplace_back("limit", "total");
  out->Counter("tessera_rpc_refused_connections_total",
               "Connections refused for a limit: per_peer in their handshake, total as they were accepted.", per_peer,
               static_cast<double>(refused_per_peer_.load(std::memory_order_relaxed)));
  out->Counter("tessera_rpc_refused_connections_total",
               "Connections refused for a limit: per_peer in their handshake, total as they were accepted.", total,
               static_cast<double>(refused_total_.load(std::memory_order_relaxed)));
}

void RpcServer::Dispatch(std::string routing_id, Role peer_role, Message&& request) {
  const auto received = std::chrono::steady_clock::now();
  const size_t bytes = rpc_internal::MessageBytes(request);
  if (workers_.empty()) {
    Responder responder(sink_, std::move(routing_id), request.header, peer_role, received, bytes);
    try {
      handler_(std::move(request), std::move(responder));
    } catch (const std::exception& e) {
      LOG(ERROR) << "handler threw: " << e.what();
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    work_.push_back(Work{std::move(routing_id), peer_role, std::move(request), received, bytes});
  }
  work_cv_.notify_one();
}

void RpcServer::Post(std::function<void()> task) {
  if (workers_.empty()) {
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    Work w;
    w.task = std::move(task);
    work_.push_back(std::move(w));
  }
  work_cv_.notify_one();
}

void RpcServer::WorkerLoop() {
  for (;;) {
    Work w;
    {
      std::unique_lock<std::mutex> lock(work_mu_);
      work_cv_.wait(lock, [this] { return workers_done_ || !work_.empty(); });
      if (workers_done_) return;
      w = std::move(work_.front());
      work_.pop_front();
    }
    if (w.task) {
      try {
        w.task();
      } catch (const std::exception& e) {
        LOG(ERROR) << "posted task threw: " << e.what();
      }
      continue;
    }
    Responder responder(sink_, std::move(w.routing_id), w.request.header, w.peer_role, w.received, w.bytes);
    try {
      handler_(std::move(w.request), std::move(responder));
    } catch (const std::exception& e) {
      // The Responder was destroyed while unwinding and answered INTERNAL.
      LOG(ERROR) << "handler threw: " << e.what();
    }
  }
}

void RpcServer::ReadMonitor() {
  // Connections over the total, by descriptor, with the address each came
  // from: closed once every event waiting has been read, so that one whose
  // connection has closed since (its DISCONNECTED follows its ACCEPTED) is
  // left alone, as is its descriptor accepted anew for another connection.
  std::unordered_map<int, std::string> to_close;
  for (;;) {
    // An event is two frames: 2 bytes of event id and 4 of value (here the
    // connection's descriptor), then the endpoint.
    zmq::message_t event, address;
    if (!monitor_->recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)monitor_->recv(address, zmq::recv_flags::dontwait);
    if (event.size() < sizeof(uint16_t) + sizeof(uint32_t)) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
    const int fd = static_cast<int>(value);
    if (id == ZMQ_EVENT_DISCONNECTED) {
      connections_.Closed(fd);
      to_close.erase(fd);
    } else if (id == ZMQ_EVENT_ACCEPTED) {
      std::string peer = PeerAddressOf(fd);
      if (connections_.Accepted(fd, peer) == PeerConnections::Admit::kOverTotal) {
        to_close[fd] = std::move(peer);
      } else {
        to_close.erase(fd);
      }
    }
  }
  for (const auto& [fd, peer] : to_close) {
    // libzmq then drops the connection as any whose peer hung up. Between the
    // last event read and here libzmq could still have closed the descriptor
    // and reused it: it must still be a connection to this port from the
    // same address.
    if (port_ > 0 && LocalPortOf(fd) == port_ && PeerAddressOf(fd) == peer) (void)shutdown(fd, SHUT_RDWR);
    refused_total_.fetch_add(1, std::memory_order_relaxed);
    LOG_EVERY_N(WARNING, 100) << "closed a connection from " << (peer.empty() ? "?" : peer) << " to " << endpoint_
                              << " as it was accepted: the server holds " << connections_.open()
                              << " connections, its most (max_connections; seen " << google::COUNTER << " times)";
  }
  open_connections_.store(static_cast<int64_t>(connections_.open()), std::memory_order_relaxed);
}

void RpcServer::AnswerZap() {
  // The connections' events first: the handshake asking was accepted
  // before it began, so its own connection is counted.
  ReadMonitor();
  // ZAP (RFC 27): version, request id, domain, address, routing id,
  // mechanism, then the mechanism's credentials (CURVE: the client's
  // 32-byte public key). The reply names the role as the User-Id, which
  // every message of the connection then carries.
  for (;;) {
    std::vector<zmq::message_t> request;
    zmq::message_t part;
    if (!zap_->recv(part, zmq::recv_flags::dontwait)) return;
    request.push_back(std::move(part));
    while (request.back().more()) {
      zmq::message_t next;
      (void)zap_->recv(next, zmq::recv_flags::none);
      request.push_back(std::move(next));
    }
    const std::string peer = request.size() >= 4 ? request[3].to_string() : std::string();
    Role role = Role::kNone;
    if (keys_ && request.size() >= 7 && request[5].to_string() == "CURVE" && request[6].size() == 32) {
      char z85[41];
      if (zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32) != nullptr) {
        role = keys_->RoleOfPublicKey(z85);
      }
    }
    const std::string request_id = request.size() >= 2 ? request[1].to_string() : "";
    // 400: not the job's key; 500: too many connections from its address,
    // which RpcClient reports as RESOURCE_EXHAUSTED. (300, ZAP's temporary
    // refusal, would be said more truly, but libzmq closes such a
    // connection without telling the client anything, which would then
    // dial again until its calls' deadlines.)
    std::string code = "200", text = "OK";
    if (keys_ && role == Role::kNone) {
      code = "400";
      text = "not one of the job's keys";
      LOG_EVERY_N(WARNING, 100) << "refused a connection from " << (peer.empty() ? "?" : peer) << " to " << endpoint_
                                << ": its key is not one of the job's (seen " << google::COUNTER << " times)";
    } else if (connections_.OverPerPeer(peer)) {
      code = "500";
      text = "too many connections from " + peer;
      refused_per_peer_.fetch_add(1, std::memory_order_relaxed);
      LOG_EVERY_N(WARNING, 100) << "refused a connection from " << peer << " to " << endpoint_ << ": "
                                << connections_.open_from(peer) - 1 << " connections from it are open, its most"
                                << " (max_connections_per_peer; seen " << google::COUNTER << " times)";
    }
    const std::string user = code == "200" && role != Role::kNone ? RoleName(role) : "";
    try {
      zap_->send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      zap_->send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      zap_->send(zmq::buffer(code), zmq::send_flags::sndmore);
      zap_->send(zmq::buffer(text), zmq::send_flags::sndmore);
      zap_->send(zmq::buffer(user), zmq::send_flags::sndmore);
      zap_->send(zmq::str_buffer(""), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      LOG(WARNING) << "ZAP reply not sent: " << e.what();
    }
  }
}

void RpcServer::IoLoop() {
  zmq::pollitem_t items[4] = {
      {static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0},
      {nullptr, sink_->wakeup.fd(), ZMQ_POLLIN, 0},
      {static_cast<void*>(*zap_), 0, ZMQ_POLLIN, 0},
      {static_cast<void*>(*monitor_), 0, ZMQ_POLLIN, 0},
  };
  std::deque<OutgoingReply> out;
  auto flush = [&] {
    {
      std::lock_guard<std::mutex> lock(sink_->mu);
      out.swap(sink_->queue);
    }
    for (OutgoingReply& r : out) {
      recent_.Answered(r.routing_id, r.message.header.request_id, r.message);
      Status st = SendMessage(*socket_, &r.routing_id, std::move(r.message));
      if (!st.ok()) LOG(WARNING) << "reply not sent: " << st;
    }
    out.clear();
  };
  while (!stop_.load()) {
    try {
      zmq::poll(items, 4, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      LOG(ERROR) << "zmq poll: " << e.what();
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) sink_->wakeup.Drain();
    if (items[3].revents & ZMQ_POLLIN) ReadMonitor();
    if (items[2].revents & ZMQ_POLLIN) AnswerZap();
    if (items[0].revents & ZMQ_POLLIN) {
      // Drain what is waiting, but bounded so replies are not starved.
      for (int i = 0; i < 256 && !stop_.load(); ++i) {
        std::string routing_id, user_id;
        Message m;
        Status st = RecvMessage(*socket_, &routing_id, &m, &user_id);
        if (st.code() == StatusCode::kNotFound) break;
        if (!st.ok()) {
          LOG(WARNING) << "malformed request from a client: " << st;
          if (!routing_id.empty()) {
            Status send = SendMessage(*socket_, &routing_id, MakeErrorReply(m.header, st));
            if (!send.ok()) LOG(WARNING) << "error reply not sent: " << send;
          }
          continue;
        }
        if (m.header.status != StatusCode::kOk) {
          // Only replies carry a status. Handlers decode with helpers shared
          // with replies, which would read such a request as an error reply
          // and answer with the sender's own words as the reason.
          const std::string why = std::string(OpcodeName(m.header.op)) + " request carries the status " +
                                  StatusCodeName(m.header.status) + ", which only replies may: refused";
          LOG(WARNING) << "malformed request from a client: " << why;
          Status send = SendMessage(*socket_, &routing_id, MakeErrorReply(m.header, Status::InvalidArgument(why)));
          if (!send.ok()) LOG(WARNING) << "error reply not sent: " << send;
          continue;
        }
        Message again;
        switch (recent_.Arrived(routing_id, m.header.request_id, &again)) {
          case RecentReplies::Seen::kInProgress:
            continue;  // its first copy's reply goes out when it is served
          case RecentReplies::Seen::kAnswered: {
            Status send = SendMessage(*socket_, &routing_id, std::move(again));
            if (!send.ok()) LOG(WARNING) << "reply sent again not sent: " << send;
            continue;
          }
          case RecentReplies::Seen::kNew:
            break;
        }
        Dispatch(std::move(routing_id), RoleFromName(user_id), std::move(m));
      }
    }
    flush();
  }
  flush();
}

}  // namespace tessera
