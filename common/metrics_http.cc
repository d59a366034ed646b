#include "common/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <glog/logging.h>

namespace tessera {
namespace {

// cpp-httplib's own pool queues every accepted connection, each holding a
// descriptor until a worker reads it: a flood of connections that send
// nothing would take all of a server's descriptors, which its RocksDB files,
// checkpoints and ZeroMQ sockets need. This pool queues a few; with the queue
// full, the accepting thread answers the next connection itself, so it
// accepts no more until that one is done and the rest wait in the kernel's
// listen backlog, holding no descriptor of ours.
class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, size_t max_waiting) : max_waiting_(max_waiting) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.size() < max_waiting_) {
        waiting_.push_back(std::move(fn));
        ready_.notify_one();
        return;
      }
    }
    fn();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& w : workers_) w.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
        // Connections accepted before the stop are still answered (and closed).
        if (waiting_.empty()) return;
        fn = std::move(waiting_.front());
        waiting_.pop_front();
      }
      fn();
    }
  }

  const size_t max_waiting_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> waiting_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& address, int port,
                                                                      const MetricsRegistry* registry) {
  if (port < 0 || port > 65535) return Status::InvalidArgument("metrics port " + std::to_string(port) + " is not a port");
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  // Scrapes come every few seconds from one or two scrapers: two threads,
  // not cpp-httplib's default of one per core, and a few connections waiting.
  s->server_->new_task_queue = [] { return new BoundedTaskQueue(kMetricsThreads, kMetricsWaitingConnections); };
  // SO_REUSEADDR (a restarted role gets its port back at once) but not
  // cpp-httplib's default SO_REUSEPORT, with which two roles given the same
  // port would both bind it and scrapes would reach either at random.
  s->server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->server_->set_read_timeout(5, 0);
  s->server_->set_write_timeout(5, 0);
  s->server_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->address_ = address;
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(address);
    if (s->port_ <= 0) return Status::Unavailable("cannot bind the metrics endpoint to " + address);
  } else {
    if (!s->server_->bind_to_port(address, port)) {
      return Status::Unavailable("cannot bind the metrics endpoint to " + address + ":" + std::to_string(port) +
                                 " (in use, or not this host's address)");
    }
    s->port_ = port;
  }
  httplib::Server* server = s->server_.get();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  s->thread_ = std::thread([server, ended] {
    server->listen_after_bind();
    *ended = true;
  });
  // stop() does nothing until the thread is listening: wait for it, so that
  // a server destroyed at once still ends.
  while (!server->is_running() && !*ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (*ended) return Status::Unavailable("the metrics endpoint at " + s->url() + " stopped at once");
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsHttpServer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + "/metrics";
}

std::string MetricsAddress(const std::string& given, const std::string& bind_endpoint) {
  if (!given.empty()) return given;
  const size_t scheme = bind_endpoint.find("://");
  const size_t colon = bind_endpoint.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon <= scheme + 3) return "127.0.0.1";
  std::string host = bind_endpoint.substr(scheme + 3, colon - scheme - 3);
  if (host == "*") return "0.0.0.0";
  // An IPv6 literal comes bracketed in a ZeroMQ endpoint.
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

StatusOr<std::unique_ptr<MetricsHttpServer>> MaybeServeMetrics(const std::string& address, int port,
                                                               const MetricsRegistry* registry) {
  if (port < 0) return std::unique_ptr<MetricsHttpServer>();
  auto server = MetricsHttpServer::Start(address, port, registry);
  if (!server.ok()) return server.status();
  LOG(INFO) << "serving metrics on " << (*server)->url();
  return server;
}

}  // namespace tessera
