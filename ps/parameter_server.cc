#include "ps/parameter_server.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/endpoint.h"
#include "common/master_registration.h"
#include "common/messages.h"
#include "ps/ps_metrics.h"

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(const ParameterServerOptions& options) {
  if (options.master.empty()) return Status::InvalidArgument("the master's address is required (--master tcp://HOST:PORT)");
  // Lookups and pushes wait for steps: on the I/O thread (0 workers) they
  // would hold up the replies they wait for. Past a few hundred, threads
  // only contend (and tens of thousands exhaust the system's pids).
  constexpr int kMaxThreads = 1024;
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return Status::InvalidArgument("--threads " + std::to_string(options.threads) + ": a server serves lookups and " +
                                   "pushes on 1 to " + std::to_string(kMaxThreads) + " threads");
  }
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  ps->options_ = options;
  // The rank is known only after registration; the service learns it then.
  PsServiceOptions service_options;
  service_options.store_factory = MakeRowStoreFactory(options.storage);
  service_options.before_control = options.before_control;
  service_options.stores_named_by_id = !options.storage.rocksdb_path.empty();
  ParameterServer* self = ps.get();
  service_options.call_server = [self](const std::string& endpoint, Message&& request, milliseconds timeout,
                                       const std::atomic<bool>* cancel) {
    return self->CallServer(endpoint, std::move(request), timeout, cancel);
  };
  service_options.end_server_calls = [self] { self->EndServerCalls(); };
  service_options.storage_lost = [self](const Status& why) {
    self->Stop(why.WithContext("its store's rows are damaged; leaving the job"));
  };
  service_options.test_data_loss_at_lookup = options.test_data_loss_at_lookup;
  // Released lookups come only from requests server_ handed in: it exists.
  service_options.run_on_worker = [self](std::function<void()> task) { self->server_->Post(std::move(task)); };
  ps->service_ = std::make_unique<PsService>(service_options);
  PsService* service = ps->service_.get();
  RpcServerOptions server_options;
  server_options.bind_address = options.bind_address;
  server_options.worker_threads = options.threads;
  server_options.keys = options.keys;
  server_options.connections = options.connections;
  TESSERA_ASSIGN_OR_RETURN(ps->server_, RpcServer::Start(server_options, [service](Message&& m, Responder r) {
                             service->Handle(std::move(m), std::move(r));
                           }));
  ps->endpoint_ = ReplaceEndpointHost(ps->server_->endpoint(), options.advertise_host);
  TESSERA_ASSIGN_OR_RETURN(ps->client_, RpcClient::Create(options.keys));
  TESSERA_ASSIGN_OR_RETURN(ps->master_peer_, ps->client_->Connect(options.master, Role::kMaster));
  ps->server_peers_ = std::make_unique<PeerPool<std::string>>(ps->client_.get(), Role::kPs);
  return ps;
}

StatusOr<Message> ParameterServer::CallServer(const std::string& endpoint, Message&& request, milliseconds timeout,
                                              const std::atomic<bool>* cancel) {
  TESSERA_ASSIGN_OR_RETURN(const int peer, server_peers_->Get(endpoint, endpoint));
  // A server that died closes its connection at once: give up after a
  // second of that rather than at the deadline, as the master does.
  constexpr milliseconds kConnectionLoss{1000};
  RpcFuture reply = client_->Call(peer, std::move(request), timeout);
  while (!reply.WaitFor(milliseconds(50))) {
    const auto down = client_->DisconnectedSince(peer);
    if (down && std::chrono::steady_clock::now() - *down > kConnectionLoss) {
      client_->CancelCalls(peer, Status::Unavailable("the parameter server at " + endpoint +
                                                     " closed its connection: it died"));
    } else if (cancel != nullptr && cancel->load()) {
      client_->CancelCalls(peer, Status::Cancelled("cancelled"));
    }
  }
  return reply.Wait();
}

void ParameterServer::EndServerCalls() {
  // Absent when Start failed before making it (the destructor ends the calls too).
  if (server_peers_) server_peers_->ForgetAll();
}

ParameterServer::~ParameterServer() {
  if (server_) server_->Stop();
  // Its fetches and EndServerCalls use client_, which would go first.
  service_.reset();
}

Status ParameterServer::Register() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  RegisterRequest req;
  req.role = "ps";
  req.endpoint = endpoint_;
  req.host = options_.host_group.empty() ? std::string(host) : options_.host_group;
  req.memory_bytes = options_.memory_bytes;
  req.pid = static_cast<int64_t>(getpid());
  // Re-registering with a master that took over: the plan it follows, which
  // the new master's generations go on from.
  req.generation = service_->plan_version();
  TESSERA_ASSIGN_OR_RETURN(json j, RegisterWithMaster(client_.get(), master_peer_, options_.master, req.ToJson(),
                                                      milliseconds(options_.register_timeout_ms)));
  TESSERA_ASSIGN_OR_RETURN(RegisterReply reply, RegisterReply::Parse(j));
  rank_ = reply.rank;
  heartbeat_ms_ = reply.heartbeat_ms;
  peer_timeout_ms_ = reply.peer_timeout_ms;
  master_reconnect_ms_ = reply.master_reconnect_ms;
  master_id_ = reply.master_id;
  service_->set_rank(rank_);
  service_->set_master(reply.master_client);
  LOG(INFO) << "registered with the master " << options_.master << " as ps " << rank_ << " (" << endpoint_ << ")";
  return Status::OK();
}

Status ParameterServer::Leave() {
  Command leave;
  leave.command = "remove_ps";
  leave.ps = rank_;
  leave.why = "the server was asked to stop";
  auto reply = client_->CallSync(master_peer_, EncodeJson(Opcode::kCommand, leave.ToJson()), milliseconds(10000));
  return reply.status();
}

void ParameterServer::WriteMetrics(PrometheusText* out) const {
  server_->WriteMetrics(out, {{"role", "ps"}});
  WritePsMetrics(service_->Stats(), out);
}

void ParameterServer::Stop(const Status& why) {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stop_reason_.ok()) stop_reason_ = why.ok() ? Status::Cancelled("stopped") : why;
}

Status ParameterServer::Run() {
  TESSERA_RETURN_IF_ERROR(Register());
  auto last_contact = std::chrono::steady_clock::now();
  auto shut_down = [this] {
    LOG(INFO) << "ps " << rank_ << ": shutdown requested by the master";
    return Status::OK();
  };
  for (;;) {
    if (service_->WaitForShutdown(milliseconds(heartbeat_ms_))) return shut_down();
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (!stop_reason_.ok()) {
        service_->Abort(stop_reason_);
        return stop_reason_;
      }
    }
    HeartbeatRequest beat;
    beat.role = "ps";
    beat.rank = rank_;
    beat.master_id = master_id_;
    beat.stats = service_->Stats();
    auto reply =
        client_->CallSync(master_peer_, EncodeJson(Opcode::kHeartbeat, beat.ToJson()), milliseconds(heartbeat_ms_ * 2));
    const auto now = std::chrono::steady_clock::now();
    if (reply.ok()) {
      last_contact = now;
      auto j = DecodeJson(*reply);
      auto answer = j.ok() ? HeartbeatReply::Parse(*j) : StatusOr<HeartbeatReply>(j.status());
      if (answer.ok() && answer->state == "aborted") {
        const std::string reason = answer->reason.empty() ? "job aborted" : answer->reason;
        service_->Abort(Status::Aborted(reason));
        return Status::Aborted(reason);
      }
    } else if (reply.status().code() == StatusCode::kFailedPrecondition) {
      // The master died and another took over its address (--recover). The
      // shards stay as they are until the new master re-creates them.
      LOG(WARNING) << "ps " << rank_ << ": " << reply.status().message();
      TESSERA_RETURN_IF_ERROR(Register().WithContext("registering with the master that took over"));
      last_contact = std::chrono::steady_clock::now();
      continue;
    } else if (reply.status().code() != StatusCode::kDeadlineExceeded) {
      // The master answered with an error: it no longer knows this server.
      // A drained server learns that from a heartbeat that crossed the
      // master's SHUTDOWN (its reply goes out before the server notes it):
      // then it has left as asked.
      if (service_->WaitForShutdown(milliseconds(heartbeat_ms_))) return shut_down();
      service_->Abort(reply.status());
      return reply.status().WithContext("heartbeat");
    }
    if (now - last_contact > milliseconds(master_reconnect_ms_)) {
      Status lost = Status::Unavailable("lost contact with the master " + options_.master + " for over " +
                                        std::to_string(master_reconnect_ms_) + " ms (runtime.master_reconnect_ms; " +
                                        client_->DescribeLink(master_peer_) + ")");
      service_->Abort(lost);
      return lost;
    }
  }
}

}  // namespace tessera
