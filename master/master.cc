#include "master/master.h"

#include <cstdio>
#include <iostream>
#include <thread>

#include <glog/logging.h>

#include "common/endpoint.h"
#include "common/messages.h"
#include "master/planner.h"
#include "master/storage_summary.h"

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

StatusOr<std::unique_ptr<Master>> Master::Start(const MasterOptions& options, const JobConfig& job) {
  std::unique_ptr<Master> m(new Master());
  m->options_ = options;
  m->job_ = job;
  m->trainers_.resize(job.cluster.num_trainers);
  m->barrier_.resize(job.cluster.num_trainers);
  Master* self = m.get();
  // Handlers only update membership and answer: the I/O thread runs them.
  TESSERA_ASSIGN_OR_RETURN(m->server_, RpcServer::Start(RpcServerOptions{options.bind_address, 0},
                                                        [self](Message&& msg, Responder r) {
                                                          self->Handle(std::move(msg), std::move(r));
                                                        }));
  m->endpoint_ = ReplaceEndpointHost(m->server_->endpoint(), options.advertise_host);
  TESSERA_ASSIGN_OR_RETURN(m->client_, RpcClient::Create());
  return m;
}

Message Master::StartReply(const Header& request) const {
  Message m = EncodeJsonReply(request, start_info_);
  // A resumed job's trainers get trainer 0's saved state.
  if (options_.resume) m.AddString(resume_state_);
  return m;
}

Master::~Master() {
  if (server_) server_->Stop();
}

void Master::RequestAbort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (requested_abort_.empty()) requested_abort_ = reason;
  }
  cv_.notify_all();
}

bool Master::AbortRequested(Status* reason) {
  if (requested_abort_.empty()) return false;
  *reason = Status::Aborted(requested_abort_);
  return true;
}

StatusOr<JobSummary> Master::Run() {
  started_at_ = Clock::now();
  Status st = WaitForMembers();
  if (st.ok()) st = StartJob();
  if (st.ok()) st = MonitorUntilDone();
  if (!st.ok()) {
    AbortJob(st);
    return st;
  }
  return FinishJob();
}

Status Master::WaitForMembers() {
  LOG(INFO) << "master listening on " << endpoint_ << "; waiting for " << job_.cluster.num_ps
            << " parameter server(s) and " << job_.cluster.num_trainers << " trainer(s)";
  const auto deadline = Clock::now() + milliseconds(options_.register_timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Status reason;
    if (AbortRequested(&reason)) return reason;
    int trainers = 0;
    for (const auto& t : trainers_) trainers += t.has_value();
    if (static_cast<int>(ps_.size()) == job_.cluster.num_ps && trainers == job_.cluster.num_trainers) return Status::OK();
    const auto now = Clock::now();
    TESSERA_RETURN_IF_ERROR(FindDeadMember(now));
    if (now > deadline) {
      return Status::DeadlineExceeded("only " + std::to_string(ps_.size()) + "/" + std::to_string(job_.cluster.num_ps) +
                                      " parameter servers and " + std::to_string(trainers) + "/" +
                                      std::to_string(job_.cluster.num_trainers) + " trainers registered within " +
                                      std::to_string(options_.register_timeout_ms) + " ms");
    }
    cv_.wait_for(lock, milliseconds(100));
  }
}

Status Master::StartJob() {
  std::vector<std::string> endpoints;
  PlannerOptions planner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kStarting;
    for (const PsMember& p : ps_) {
      endpoints.push_back(p.endpoint);
      planner.servers.push_back(ServerInfo{p.host, p.memory_bytes});
    }
  }
  if (options_.resume) TESSERA_RETURN_IF_ERROR(LoadResumePoint());
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, PlanSharding(job_, planner));
  std::cout << FormatPlan(job_, plan) << std::flush;
  for (const std::string& e : endpoints) {
    TESSERA_ASSIGN_OR_RETURN(int peer, client_->Connect(e));
    ps_peers_.push_back(peer);
  }
  const json job_json = job_.ToJson();
  const json plan_json = plan.ToJson();
  for (int ps = 0; ps < job_.cluster.num_ps; ++ps) {
    Status st;
    json body = {{"job", job_json}, {"plan", plan_json}};
    if (options_.resume) body["restore"] = resume_restore_;
    // Restoring reads the checkpoint's rows: allow it time.
    CallServer(ps, Opcode::kCreateShards, body, milliseconds(options_.resume ? 3600000 : 60000), &st);
    if (!st.ok()) return st.WithContext("creating shards on parameter server " + std::to_string(ps));
  }
  std::vector<Responder> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    plan_ = plan;
    start_info_ = {{"job", job_json},
                   {"plan", plan_json},
                   {"ps_endpoints", endpoints},
                   {"dump_dir", options_.dump_dir},
                   {"start_step", resume_step_}};
    state_ = State::kRunning;
    waiters.swap(start_waiters_);
    // The clock of liveness restarts: the start may have taken a while.
    const auto now = Clock::now();
    for (auto& p : ps_) p.last_seen = now;
    for (auto& t : trainers_) t->last_seen = now;
  }
  for (Responder& r : waiters) r.Reply(StartReply(r.request_header()));
  started_at_ = Clock::now();
  LOG(INFO) << "job '" << job_.name << "' started: " << job_.cluster.num_trainers << " trainer(s), "
            << job_.cluster.num_ps << " parameter server(s), " << ConsistencyName(job_.training.consistency)
            << " mode";
  return Status::OK();
}

Status Master::FindDeadMember(Clock::time_point now) const {
  const auto timeout = milliseconds(job_.runtime.peer_timeout_ms);
  auto silent = [&](Clock::time_point last) {
    return std::to_string(std::chrono::duration_cast<milliseconds>(now - last).count() / 1000.0).substr(0, 5);
  };
  // When several are silent, the one silent longest went first; the others
  // are often stuck waiting for it (an allreduce, a sync lookup).
  Clock::time_point oldest = now - timeout;
  std::string who;
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (ps_[i].last_seen < oldest) {
      oldest = ps_[i].last_seen;
      who = "parameter server " + std::to_string(i) + " (" + ps_[i].endpoint + ", pid " + std::to_string(ps_[i].pid) +
            ")";
    }
  }
  for (size_t i = 0; i < trainers_.size(); ++i) {
    const auto& t = trainers_[i];
    if (t && !t->done && t->last_seen < oldest) {
      oldest = t->last_seen;
      who = "trainer " + std::to_string(i) + " (host " + t->host + ", pid " + std::to_string(t->pid) + ")";
    }
  }
  if (who.empty()) return Status::OK();
  return Status::Unavailable(who + " sent no heartbeat for " + silent(oldest) + " s: it died or hangs");
}

void Master::PrintProgress() {
  const int world = job_.cluster.num_trainers;
  while (!progress_.empty() && progress_.begin()->second.reported >= world) {
    const auto [step, p] = *progress_.begin();
    progress_.erase(progress_.begin());
    char line[160];
    std::snprintf(line, sizeof(line), "[master] step %7lld  loss %.5f  examples/s %10.0f", static_cast<long long>(step),
                  p.examples > 0 ? p.loss_sum / p.examples : 0.0, p.examples_per_s);
    std::cout << line << std::endl;
  }
}

Status Master::MonitorUntilDone() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Status reason;
    if (AbortRequested(&reason)) return reason;
    const auto now = Clock::now();
    Status dead = FindDeadMember(now);
    if (!reported_failure_.empty()) {
      if (!dead.ok()) return Status(dead.code(), dead.message() + " (then " + reported_failure_ + ")");
      if (now - reported_failure_at_ > milliseconds(job_.runtime.peer_timeout_ms)) {
        return Status::Aborted(reported_failure_);
      }
    } else {
      TESSERA_RETURN_IF_ERROR(dead);
      bool all_done = true;
      for (const auto& t : trainers_) all_done = all_done && t->done;
      if (all_done) return Status::OK();
      TESSERA_RETURN_IF_ERROR(ServeBarrier(&lock));
    }
    cv_.wait_for(lock, milliseconds(100));
  }
}

json Master::CallServer(int ps, Opcode op, const json& body, milliseconds timeout, Status* status) {
  auto reply = client_->CallSync(ps_peers_[ps], EncodeJson(op, body), timeout);
  if (!reply.ok()) {
    *status = reply.status();
    return json();
  }
  if (reply->frames.empty()) {
    *status = Status::OK();
    return json::object();
  }
  auto j = DecodeJson(*reply);
  *status = j.status();
  return j.ok() ? *j : json();
}

void Master::AbortJob(const Status& reason) {
  LOG(ERROR) << "job '" << job_.name << "' failed: " << reason;
  std::vector<Responder> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kAborted;
    abort_reason_ = reason;
    waiters.swap(start_waiters_);
    for (auto& a : barrier_) {
      if (a) waiters.push_back(std::move(a->responder));
      a.reset();
    }
  }
  for (Responder& r : waiters) r.ReplyError(reason);
  store_.FailWaiters(reason);
  for (size_t ps = 0; ps < ps_peers_.size(); ++ps) {
    Status st;
    CallServer(static_cast<int>(ps), Opcode::kAbort, json{{"reason", reason.message()}}, milliseconds(2000), &st);
  }
  // Trainers and servers that are still alive learn the end from their next
  // heartbeat; stay up long enough to tell them.
  std::this_thread::sleep_for(milliseconds(3 * job_.runtime.heartbeat_ms));
}

StatusOr<JobSummary> Master::FinishJob() {
  const double wall_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  json servers = json::array();
  for (int ps = 0; ps < static_cast<int>(ps_peers_.size()); ++ps) {
    Status st;
    json stats;
    if (!options_.dump_dir.empty()) {
      CallServer(ps, Opcode::kDumpShards, json{{"dir", options_.dump_dir}}, milliseconds(120000), &st);
      if (!st.ok()) return st.WithContext("dumping the shards of parameter server " + std::to_string(ps));
    }
    stats = CallServer(ps, Opcode::kServerStats, json::object(), milliseconds(10000), &st);
    servers.push_back(st.ok() ? stats : json{{"error", st.ToString()}});
    CallServer(ps, Opcode::kShutdown, json::object(), milliseconds(10000), &st);
    if (!st.ok()) LOG(WARNING) << "parameter server " << ps << " did not acknowledge shutdown: " << st;
  }
  json trainers = json::array();
  double examples_per_s = 0;
  json eval;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kDone;
    for (const auto& t : trainers_) {
      trainers.push_back(t->report);
      examples_per_s += t->report.value("examples_per_s", 0.0);
      if (t->report.contains("eval")) eval = t->report["eval"];
    }
  }
  JobSummary summary;
  summary.json = {{"job", job_.name},       {"ok", true},          {"wall_s", wall_s},
                  {"examples_per_s", examples_per_s}, {"trainers", trainers}, {"parameter_servers", servers}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    summary.json["checkpoints"] = checkpoints_;
  }
  summary.json["storage"] = SummarizeStorage(servers);
  if (!eval.is_null()) summary.json["eval"] = eval;
  return summary;
}

}  // namespace tessera
