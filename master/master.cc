#include "master/master.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
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
  m->master_id_ = static_cast<int64_t>(std::random_device{}() & 0x7fffffffu) << 31 | std::random_device{}() >> 1;
  if (m->master_id_ == 0) m->master_id_ = 1;
  m->barrier_ = StepBarrier<Responder>(job.cluster.num_trainers);
  m->listening_ = ListeningClock(ListeningClock::PauseFor(milliseconds(job.runtime.peer_timeout_ms)));
  Master* self = m.get();
  // Handlers only update membership and answer: the I/O thread runs them.
  RpcServerOptions server_options;
  server_options.bind_address = options.bind_address;
  server_options.keys = options.keys;
  server_options.connections = options.connections;
  TESSERA_ASSIGN_OR_RETURN(m->server_, RpcServer::Start(server_options, [self](Message&& msg, Responder r) {
                             self->Handle(std::move(msg), std::move(r));
                           }));
  m->endpoint_ = ReplaceEndpointHost(m->server_->endpoint(), options.advertise_host);
  TESSERA_ASSIGN_OR_RETURN(m->client_, RpcClient::Create(options.keys));
  m->ps_peers_ = std::make_unique<PeerPool<int>>(m->client_.get(), Role::kPs);
  return m;
}

Message Master::StartReply(const Header& request) const {
  Message m = EncodeJsonReply(request, start_info_);
  // Trainers of a generation that starts from a checkpoint get trainer 0's
  // saved state.
  if (!start_state_.empty()) m.AddString(start_state_);
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
    const auto now = Clock::now();
    // A server takes orders once it has read its REGISTER reply, which its
    // first heartbeat shows (before that it refuses CREATE_SHARDS as a
    // stranger's: it does not know the master's connection yet).
    bool all_ready = true;
    for (const auto& [id, p] : ps_) all_ready = all_ready && p.ready;
    if (trainers == job_.cluster.num_trainers && all_ready) {
      if (static_cast<int>(ps_.size()) == job_.cluster.num_ps) return Status::OK();
      // Taking over: servers that died with the old master never come back.
      const bool waited = now - started_at_ > milliseconds(job_.runtime.peer_timeout_ms);
      if (options_.recover && (static_cast<int>(ps_.size()) > job_.cluster.num_ps || (waited && !ps_.empty()))) {
        return Status::OK();
      }
    }
    int dead_ps = -1;
    TESSERA_RETURN_IF_ERROR(FindDeadMember(now, &dead_ps));
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
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kStarting;
    for (const auto& [id, p] : ps_) members.push_back(id);
  }
  RestorePoint from;
  if (options_.resume) {
    TESSERA_ASSIGN_OR_RETURN(from, NewestRestorePoint(/*required=*/true));
    std::cout << "[master] resuming from " << from.dir << " at step " << from.step << std::endl;
  } else if (options_.recover) {
    TESSERA_ASSIGN_OR_RETURN(from, NewestRestorePoint(/*required=*/false));
    std::cout << "[master] took the job over from its lost master; rolling back to step " << from.step << " ("
              << (from.dir.empty() ? "no checkpoint: from the start" : from.dir) << ") on " << members.size()
              << " parameter server(s)" << std::endl;
  }
  TESSERA_RETURN_IF_ERROR(StartGeneration(members, from));
  started_at_ = Clock::now();
  LOG(INFO) << "job '" << job_.name << "' started: " << job_.cluster.num_trainers << " trainer(s), "
            << members.size() << " parameter server(s), " << ConsistencyName(job_.training.consistency) << " mode";
  return Status::OK();
}

std::string Master::DescribeServer(int member) const {
  auto it = ps_.find(member);
  if (it == ps_.end()) return "parameter server " + std::to_string(member);
  return "parameter server " + std::to_string(member) + " (" + it->second.endpoint + ", pid " +
         std::to_string(it->second.pid) + ")";
}

Status Master::FindDeadMember(Clock::time_point now, int* ps, int* trainer) {
  *ps = -1;
  int lost_trainer = -1;
  const auto timeout = milliseconds(job_.runtime.peer_timeout_ms);
  NoteSilenceCheck(now);
  auto silent = [&](Clock::time_point last) {
    return std::to_string(std::chrono::duration_cast<milliseconds>(now - last).count() / 1000.0).substr(0, 5);
  };
  // A server outside the running generation holds nothing yet: forget it.
  for (auto it = ps_.begin(); it != ps_.end();) {
    const bool in_generation =
        std::find(generation_ps_.begin(), generation_ps_.end(), it->first) != generation_ps_.end();
    const Clock::time_point heard = listening_.Heard(it->second.last_seen);
    if (state_ != State::kWaiting && !in_generation && heard < now - timeout) {
      LOG(WARNING) << DescribeServer(it->first) << " sent no heartbeat for " << silent(heard)
                   << " s before it joined the job; forgotten";
      it = ps_.erase(it);
    } else {
      ++it;
    }
  }
  // A server of the generation whose connection closed and stayed closed
  // crashed: no need to wait for its silence.
  for (int id : generation_ps_) {
    const std::optional<int> peer = ps_peers_->Find(id);
    if (!peer || ps_.count(id) == 0) continue;
    if (auto down = ConnectionLostSince(*peer, now)) {
      *ps = id;
      if (trainer != nullptr) *trainer = -1;
      return Status::Unavailable(DescribeServer(id) + " closed its connection " + silent(*down) +
                                 " s ago and did not reconnect: it died");
    }
  }
  // When several are silent, the one silent longest went first; the others
  // are often stuck waiting for it (an allreduce, a sync lookup).
  Clock::time_point oldest = now - timeout;
  std::string who;
  for (const auto& [id, p] : ps_) {
    if (listening_.Heard(p.last_seen) < oldest) {
      oldest = listening_.Heard(p.last_seen);
      who = DescribeServer(id);
      *ps = id;
      lost_trainer = -1;
    }
  }
  for (size_t i = 0; i < trainers_.size(); ++i) {
    const auto& t = trainers_[i];
    if (t && !t->done && listening_.Heard(t->last_seen) < oldest) {
      oldest = listening_.Heard(t->last_seen);
      who = "trainer " + std::to_string(i) + " (host " + t->host + ", pid " + std::to_string(t->pid) + ")";
      *ps = -1;
      lost_trainer = static_cast<int>(i);
    }
  }
  if (trainer != nullptr) *trainer = lost_trainer;
  if (who.empty()) return Status::OK();
  return Status::Unavailable(who + " sent no heartbeat for " + silent(oldest) + " s: it died or hangs");
}

void Master::NoteSilenceCheck(Clock::time_point now) {
  const Clock::duration paused = listening_.Check(now);
  if (paused > Clock::duration::zero()) {
    LOG(WARNING) << "the master did not run for " << std::chrono::duration<double>(paused).count()
                 << " s (stopped, or starved of CPU): the members' silence until now is not counted";
  }
}

Status Master::FindStalledTrainer(Clock::time_point now) const {
  if (job_.runtime.stall_timeout_ms <= 0) return Status::OK();
  // One stuck trainer stalls the others (they wait for it in the
  // allreduce): all are named, with the steps each finished. The master
  // learns of steps from heartbeats, so the others' last steps may seem up
  // to a heartbeat apart: once one trainer is past the timeout, every
  // trainer stalled for half of it is named too.
  const milliseconds timeout(job_.runtime.stall_timeout_ms);
  bool any = false;
  for (const auto& t : trainers_) any = any || (t && !t->done && now - listening_.Heard(t->stepped_at) >= timeout);
  if (!any) return Status::OK();
  std::string who;
  double longest = 0;
  for (size_t i = 0; i < trainers_.size(); ++i) {
    const auto& t = trainers_[i];
    if (!t || t->done || now - listening_.Heard(t->stepped_at) < timeout / 2) continue;
    longest = std::max(longest, std::chrono::duration<double>(now - listening_.Heard(t->stepped_at)).count());
    who += (who.empty() ? "" : ", ") + std::string("trainer ") + std::to_string(i) + " (host " + t->host + ", pid " +
           std::to_string(t->pid) + ", " + std::to_string(std::max<int64_t>(t->steps_done, 0)) + " steps done)";
  }
  if (who.empty()) return Status::OK();
  return Status::DeadlineExceeded(who + " heartbeat but finished no step for " +
                                  std::to_string(static_cast<int64_t>(longest)) +
                                  " s (runtime.stall_timeout_ms): stuck (an input that blocks? a deadlock?)");
}

void Master::PrintProgress() {
  const int world = job_.cluster.num_trainers;
  while (!progress_.empty() && progress_.begin()->second.reported >= world) {
    const auto [step, p] = *progress_.begin();
    progress_.erase(progress_.begin());
    const double loss = p.examples > 0 ? p.loss_sum / p.examples : 0.0;
    const double steps_per_s =
        p.examples_per_s / static_cast<double>(std::max<int64_t>(1, job_.training.batch_size * world));
    if (!progress_line_) progress_line_ = std::make_unique<ProgressLine>(std::cout, options_.live_progress);
    const int64_t total = p.total_steps > 0 ? p.total_steps : job_.training.steps;
    shown_ = ShownProgress{step, total, p.epoch, loss, p.examples_per_s, true};
    progress_line_->Show(FormatProgressLine(step, total, p.epoch, loss, p.examples_per_s, steps_per_s));
  }
}

Status Master::MonitorUntilDone() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Status reason;
    if (AbortRequested(&reason)) return reason;
    const auto now = Clock::now();
    int dead_ps = -1, dead_trainer = -1;
    Status dead = FindDeadMember(now, &dead_ps, &dead_trainer);
    const bool recover_server = dead_ps >= 0 && job_.runtime.recover_lost_servers;
    const bool recover_trainer = dead_trainer >= 0 && job_.runtime.recover_lost_trainers;
    if (!dead.ok() && (recover_server || recover_trainer)) {
      // Trainers that failed because of this member are not the cause.
      reported_failure_.clear();
      lock.unlock();
      Status st = recover_server ? RecoverFromLostServer(dead_ps, dead) : RecoverFromLostTrainer(dead_trainer, dead);
      lock.lock();
      TESSERA_RETURN_IF_ERROR(st);
      continue;
    }
    if (!reported_failure_.empty()) {
      if (!dead.ok()) return Status(dead.code(), dead.message() + " (then " + reported_failure_ + ")");
      if (now - reported_failure_at_ > milliseconds(job_.runtime.peer_timeout_ms)) {
        return Status::Aborted(reported_failure_);
      }
    } else {
      TESSERA_RETURN_IF_ERROR(dead);
      if (state_ == State::kRunning) TESSERA_RETURN_IF_ERROR(FindStalledTrainer(now));
      bool all_done = true;
      for (const auto& t : trainers_) all_done = all_done && t && t->done;
      if (all_done) return Status::OK();
      lock.unlock();
      MaybeStartPrecopy();
      lock.lock();
      if (ServerChangePending() && checkpoint_requested_id_ <= checkpoint_served_id_) {
        // The change happens at the next boundary, where the trainers wait.
        ++checkpoint_requested_id_;
        LOG(INFO) << "the job's servers change at the next step boundary";
      }
      TESSERA_RETURN_IF_ERROR(ServeBarrier(&lock));
    }
    cv_.wait_for(lock, milliseconds(100));
  }
}

StatusOr<int> Master::ServerPeer(int member) {
  if (const std::optional<int> peer = ps_peers_->Find(member)) return *peer;
  std::string endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto m = ps_.find(member);
    if (m == ps_.end()) return Status::NotFound("parameter server " + std::to_string(member) + " is not a member");
    endpoint = m->second.endpoint;
  }
  return ps_peers_->Get(member, endpoint);
}

json Master::CallServer(int member, Opcode op, const json& body, milliseconds timeout, Status* status, bool watch) {
  if (watch) {
    ServerReply r = AwaitServerCalls(StartServerCalls({member}, op, {body}, timeout)).front();
    *status = r.body.status();
    return r.body.ok() ? *r.body : json();
  }
  auto peer = ServerPeer(member);
  if (!peer.ok()) {
    *status = peer.status();
    return json();
  }
  auto reply = client_->CallSync(*peer, EncodeJson(op, body), timeout);
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

std::optional<Master::Clock::time_point> Master::ConnectionLostSince(int peer, Clock::time_point now) const {
  if (job_.runtime.connection_loss_ms <= 0) return std::nullopt;
  const auto down = client_->DisconnectedSince(peer);
  if (!down || now - *down < milliseconds(job_.runtime.connection_loss_ms)) return std::nullopt;
  return down;
}

Master::ServerCalls Master::StartServerCalls(const std::vector<int>& members, Opcode op, const std::vector<json>& bodies,
                                             milliseconds timeout) {
  ServerCalls calls;
  calls.shared = std::make_shared<ServerCalls::Shared>();
  calls.members = members;
  calls.peers.assign(members.size(), -1);
  calls.op = op;
  calls.shared->replies.resize(members.size());
  calls.shared->seconds.resize(members.size());
  const auto start = Clock::now();
  for (size_t i = 0; i < members.size(); ++i) {
    auto peer = ServerPeer(members[i]);
    if (!peer.ok()) {
      std::lock_guard<std::mutex> lock(calls.shared->mu);
      calls.shared->replies[i] = peer.status();
      ++calls.shared->done;
      continue;
    }
    calls.peers[i] = *peer;
    client_->CallAsync(*peer, EncodeJson(op, bodies[i]), timeout,
                       [shared = calls.shared, i, start](StatusOr<Message> m) {
                         std::lock_guard<std::mutex> lock(shared->mu);
                         shared->replies[i] = std::move(m);
                         shared->seconds[i] = std::chrono::duration<double>(Clock::now() - start).count();
                         ++shared->done;
                         shared->cv.notify_all();
                       });
  }
  return calls;
}

std::vector<Master::ServerReply> Master::AwaitServerCalls(const ServerCalls& calls) {
  const size_t n = calls.members.size();
  std::vector<bool> cancelled(n, false);
  for (;;) {
    std::vector<bool> pending(n);
    {
      std::unique_lock<std::mutex> wait(calls.shared->mu);
      if (calls.shared->cv.wait_for(wait, milliseconds(50), [&] { return calls.shared->done == n; })) break;
      for (size_t i = 0; i < n; ++i) pending[i] = !calls.shared->replies[i].has_value();
    }
    std::vector<std::pair<int, Status>> lost;
    {
      std::lock_guard<std::mutex> lock(mu_);
      NoteSilenceCheck(Clock::now());
      for (size_t i = 0; i < n; ++i) {
        if (!pending[i] || cancelled[i]) continue;
        auto it = ps_.find(calls.members[i]);
        const bool crashed = ConnectionLostSince(calls.peers[i], Clock::now()).has_value();
        if (it == ps_.end() || crashed ||
            Clock::now() - listening_.Heard(it->second.last_seen) > milliseconds(job_.runtime.peer_timeout_ms)) {
          cancelled[i] = true;
          lost.emplace_back(calls.peers[i],
                            Status::Unavailable(DescribeServer(calls.members[i]) +
                                                (crashed ? " closed its connection during " : " stopped sending heartbeats during ") +
                                                OpcodeName(calls.op) + (crashed ? ": it died" : ": it died or hangs")));
        }
      }
      if (!lost.empty() && calls.op == Opcode::kMigrate) {
        // The others fetch rows from the lost one, or wait for it: the
        // migration is over for all (their next CREATE_SHARDS ends it).
        for (size_t i = 0; i < n; ++i) {
          if (!pending[i] || cancelled[i]) continue;
          cancelled[i] = true;
          lost.emplace_back(calls.peers[i], Status::Cancelled("the migration lost a server: " +
                                                              lost.front().second.message()));
        }
      }
    }
    for (const auto& [peer, why] : lost) client_->CancelCalls(peer, why);
  }
  std::vector<ServerReply> out(n);
  std::lock_guard<std::mutex> lock(calls.shared->mu);
  for (size_t i = 0; i < n; ++i) {
    StatusOr<Message>& m = *calls.shared->replies[i];
    out[i].seconds = calls.shared->seconds[i];
    if (!m.ok()) {
      out[i].body = m.status();
    } else if (m->frames.empty()) {
      out[i].body = json::object();
    } else {
      out[i].body = DecodeJson(*m);
    }
  }
  return out;
}

void Master::AbortJob(const Status& reason) {
  LOG(ERROR) << "job '" << job_.name << "' failed: " << reason;
  std::vector<Responder> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kAborted;
    abort_reason_ = reason;
    for (StartWaiter& w : start_waiters_) waiters.push_back(std::move(w.responder));
    start_waiters_.clear();
    for (Responder& r : barrier_.TakeAll()) waiters.push_back(std::move(r));
  }
  for (Responder& r : waiters) r.ReplyError(reason);
  store_.FailWaiters(reason);
  for (int member : ps_peers_->keys()) {
    Status st;
    CallServer(member, Opcode::kAbort, AbortRequest{reason.message()}.ToJson(), milliseconds(2000), &st);
  }
  // Trainers and servers that are still alive learn the end from their next
  // heartbeat; stay up long enough to tell them.
  std::this_thread::sleep_for(milliseconds(3 * job_.runtime.heartbeat_ms));
}

StatusOr<JobSummary> Master::FinishJob() {
  const double wall_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  json servers = json::array();
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = generation_ps_;
  }
  for (int ps : members) {
    Status st;
    json stats;
    if (!options_.dump_dir.empty()) {
      CallServer(ps, Opcode::kDumpShards, DumpShardsRequest{options_.dump_dir}.ToJson(), milliseconds(120000), &st);
      if (!st.ok()) return st.WithContext("dumping the shards of parameter server " + std::to_string(ps));
    }
    stats = CallServer(ps, Opcode::kServerStats, json::object(), milliseconds(10000), &st);
    servers.push_back(st.ok() ? stats : json{{"error", st.ToString()}});
    CallServer(ps, Opcode::kShutdown, json::object(), milliseconds(10000), &st);
    if (!st.ok()) LOG(WARNING) << "parameter server " << ps << " did not acknowledge shutdown: " << st;
  }
  // Servers that registered but never joined a generation hold nothing.
  std::vector<int> spare;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, p] : ps_) {
      if (std::find(members.begin(), members.end(), id) == members.end()) spare.push_back(id);
    }
  }
  for (int ps : spare) {
    Status st;
    CallServer(ps, Opcode::kShutdown, json::object(), milliseconds(10000), &st);
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
    if (!failed_checkpoints_.empty()) summary.json["failed_checkpoints"] = failed_checkpoints_;
    summary.json["generations"] = generations_;
    if (!migration_stats_.empty()) summary.json["migrations"] = migration_stats_;
  }
  summary.json["storage"] = SummarizeStorage(servers);
  if (!eval.is_null()) summary.json["eval"] = eval;
  return summary;
}

}  // namespace tessera
