#include "common/rpc_server.h"

#include <exception>

#include <glog/logging.h>

#include "common/rpc_internal.h"
#include "common/zmq_transport.h"

namespace tessera {

using rpc_internal::OutgoingReply;
using rpc_internal::ReplySink;

Responder::Responder(std::shared_ptr<ReplySink> sink, std::string routing_id, Header request)
    : sink_(std::move(sink)), routing_id_(std::move(routing_id)), request_(request) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    if (sink_) ReplyError(Status::Internal("request dropped by the server"));
    sink_ = std::move(other.sink_);
    routing_id_ = std::move(other.routing_id_);
    request_ = other.request_;
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
  sink->Push(std::move(routing_id_), std::move(reply));
}

void Responder::ReplyError(const Status& status) { Reply(MakeErrorReply(request_, status)); }

void Responder::ReplyOk() { Reply(MakeReply(request_)); }

StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(const RpcServerOptions& options, RpcHandler handler) {
  std::unique_ptr<RpcServer> s(new RpcServer());
  s->handler_ = std::move(handler);
  s->sink_ = std::make_shared<ReplySink>();
  try {
    s->context_ = std::make_unique<zmq::context_t>(1);
    s->socket_ = std::make_unique<zmq::socket_t>(*s->context_, zmq::socket_type::router);
    s->socket_->set(zmq::sockopt::linger, 0);
    // Large lookups and pushes: don't drop replies under a burst.
    s->socket_->set(zmq::sockopt::sndhwm, 100000);
    s->socket_->set(zmq::sockopt::rcvhwm, 100000);
    s->socket_->bind(options.bind_address);
    s->endpoint_ = s->socket_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("cannot listen on " + options.bind_address + ": " + e.what());
  }
  for (int i = 0; i < options.worker_threads; ++i) s->workers_.emplace_back(&RpcServer::WorkerLoop, s.get());
  s->io_thread_ = std::thread(&RpcServer::IoLoop, s.get());
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
    socket_.reset();
    context_.reset();
  });
}

void RpcServer::Dispatch(std::string routing_id, Message&& request) {
  if (workers_.empty()) {
    Responder responder(sink_, std::move(routing_id), request.header);
    try {
      handler_(std::move(request), std::move(responder));
    } catch (const std::exception& e) {
      LOG(ERROR) << "handler threw: " << e.what();
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    work_.push_back(Work{std::move(routing_id), std::move(request)});
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
    Responder responder(sink_, std::move(w.routing_id), w.request.header);
    try {
      handler_(std::move(w.request), std::move(responder));
    } catch (const std::exception& e) {
      // The Responder was destroyed while unwinding and answered INTERNAL.
      LOG(ERROR) << "handler threw: " << e.what();
    }
  }
}

void RpcServer::IoLoop() {
  zmq::pollitem_t items[2] = {
      {static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0},
      {nullptr, sink_->wakeup.fd(), ZMQ_POLLIN, 0},
  };
  std::deque<OutgoingReply> out;
  auto flush = [&] {
    {
      std::lock_guard<std::mutex> lock(sink_->mu);
      out.swap(sink_->queue);
    }
    for (OutgoingReply& r : out) {
      Status st = SendMessage(*socket_, &r.routing_id, std::move(r.message));
      if (!st.ok()) LOG(WARNING) << "reply not sent: " << st;
    }
    out.clear();
  };
  while (!stop_.load()) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      LOG(ERROR) << "zmq poll: " << e.what();
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) sink_->wakeup.Drain();
    if (items[0].revents & ZMQ_POLLIN) {
      // Drain what is waiting, but bounded so replies are not starved.
      for (int i = 0; i < 256 && !stop_.load(); ++i) {
        std::string routing_id;
        Message m;
        Status st = RecvMessage(*socket_, &routing_id, &m);
        if (st.code() == StatusCode::kNotFound) break;
        if (!st.ok()) {
          LOG(WARNING) << "malformed request from a client: " << st;
          if (!routing_id.empty()) {
            Status send = SendMessage(*socket_, &routing_id, MakeErrorReply(m.header, st));
            if (!send.ok()) LOG(WARNING) << "error reply not sent: " << send;
          }
          continue;
        }
        Dispatch(std::move(routing_id), std::move(m));
      }
    }
    flush();
  }
  flush();
}

}  // namespace tessera
