// The master's request handlers: registration, heartbeats, start, done, and
// the rendezvous store. They run on the RPC server's I/O thread, so each only
// takes the lock, updates membership and answers (or parks the answer).
#include <algorithm>
#include <cstring>

#include <glog/logging.h>

#include "common/control_messages.h"
#include "common/messages.h"
#include "master/master.h"

namespace tessera {

using nlohmann::json;

namespace {

// Whether `sender` may speak as `who`, a member of role `role` that
// registered from the connection `bound`: with keys, its connection must
// hold that role's key; always, it must be the connection the member
// registered from.
// The role a REGISTER's body claims, for the key check.
Role RegisteringRole(const RegisterRequest& req) { return req.role == "ps" ? Role::kPs : Role::kTrainer; }

}  // namespace

void Master::Handle(Message&& m, Responder r) {
  const Opcode op = m.header.op;
  if (op == Opcode::kStoreSet || op == Opcode::kStoreGet || op == Opcode::kStoreAdd) {
    // The trainers' rendezvous (Gloo's peers' addresses): theirs alone.
    bool trainer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      trainer = IsTrainerConnection(r);
    }
    if (!trainer) {
      r.ReplyError(Status::PermissionDenied(std::string(OpcodeName(op)) + " from a connection that is not a "
                                            "registered trainer's: refused"));
      return;
    }
    if (m.frames.empty() || m.frames.size() > 2 || (op != Opcode::kStoreGet) != (m.frames.size() == 2)) {
      r.ReplyError(Status::InvalidArgument("store request: expected Key [Value] frames"));
      return;
    }
    const std::string key = m.frames[0].to_string();
    if (op == Opcode::kStoreSet) {
      store_.Set(key, m.frames[1].to_string());
      r.ReplyOk();
    } else if (op == Opcode::kStoreAdd) {
      if (m.frames[1].size() != sizeof(int64_t)) {
        r.ReplyError(Status::InvalidArgument("store add: the delta is an 8-byte integer"));
        return;
      }
      int64_t delta = 0;
      std::memcpy(&delta, m.frames[1].data(), sizeof(delta));  // little-endian, as every integer on the wire
      StatusOr<int64_t> count = store_.Add(key, delta);
      if (!count.ok()) {
        r.ReplyError(count.status());
        return;
      }
      Message reply = MakeReply(m.header);
      reply.AddString(std::to_string(*count));
      r.Reply(std::move(reply));
    } else {
      store_.Get(key, std::move(r));
    }
    return;
  }
  if (op == Opcode::kCheckpointBarrier) {
    HandleCheckpointBarrier(std::move(m), std::move(r));
    return;
  }
  auto body = DecodeJson(m);
  if (!body.ok()) {
    r.ReplyError(body.status());
    return;
  }
  // Each body is parsed whole (types, ranges) before a handler changes
  // anything: a malformed one is answered with what is wrong with it.
  auto dispatch = [&](auto parsed, auto handler) {
    if (!parsed.ok()) {
      r.ReplyError(parsed.status());
    } else {
      (this->*handler)(*parsed, r);
    }
  };
  switch (op) {
    case Opcode::kCommand: dispatch(Command::Parse(*body), &Master::HandleCommand); return;
    case Opcode::kRegister: dispatch(RegisterRequest::Parse(*body), &Master::HandleRegister); return;
    case Opcode::kHeartbeat: dispatch(HeartbeatRequest::Parse(*body), &Master::HandleHeartbeat); return;
    case Opcode::kWaitStart: dispatch(WaitStartRequest::Parse(*body), &Master::HandleWaitStart); return;
    case Opcode::kReportDone: dispatch(ReportDone::Parse(*body), &Master::HandleReportDone); return;
    default:
      r.ReplyError(Status::Unimplemented(std::string("the master does not handle ") + OpcodeName(op)));
  }
}

void Master::HandleRegister(const RegisterRequest& req, Responder& r) {
  if (r.peer_role() != Role::kNone && r.peer_role() != RegisteringRole(req)) {
    r.ReplyError(Status::PermissionDenied(std::string("a connection with the ") + RoleName(r.peer_role()) +
                                          " key may not register as a " + RoleName(RegisteringRole(req))));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kDone || state_ == State::kAborted) {
    r.ReplyError(Status::FailedPrecondition("the job has ended"));
    return;
  }
  RegisterReply reply;
  reply.heartbeat_ms = job_.runtime.heartbeat_ms;
  reply.peer_timeout_ms = job_.runtime.peer_timeout_ms;
  reply.master_reconnect_ms = job_.runtime.master_reconnect_ms;
  reply.master_id = master_id_;
  if (req.role == "ps") {
    const bool started = state_ != State::kWaiting;
    if (!started && !options_.recover && static_cast<int>(ps_.size()) >= job_.cluster.num_ps) {
      r.ReplyError(Status::FailedPrecondition("the job needs only " + std::to_string(job_.cluster.num_ps) +
                                              " parameter server(s), all registered"));
      return;
    }
    PsMember m;
    m.endpoint = req.endpoint;
    m.host = req.host;
    m.memory_bytes = req.memory_bytes;
    m.pid = req.pid;
    m.last_seen = Clock::now();
    m.routing_id = r.routing_id();
    const int id = next_ps_id_++;
    reply.rank = id;
    reply.master_client = client_->routing_id();
    LOG(INFO) << "parameter server " << id << " registered: " << m.endpoint << " (host " << m.host << ", pid " << m.pid
              << ")" << (started ? "; it joins the running job at the next step boundary" : "");
    ps_[id] = std::move(m);
  } else {
    const int rank = req.rank;
    if (req.world != job_.cluster.num_trainers || rank >= req.world) {
      r.ReplyError(Status::InvalidArgument("trainer says rank " + std::to_string(rank) + " of world " +
                                           std::to_string(req.world) + ", but the job has " +
                                           std::to_string(job_.cluster.num_trainers) + " trainers"));
      return;
    }
    if (trainers_[rank]) {
      if (state_ == State::kWaiting) {
        r.ReplyError(Status::AlreadyExists("trainer rank " + std::to_string(rank) + " is already registered"));
      } else {
        // A replacement started before the master found the old one lost
        // (it may be hung, not dead): it is taken once the rank is free.
        // Unavailable makes the newcomer retry.
        r.ReplyError(Status::Unavailable("trainer rank " + std::to_string(rank) + " is held by pid " +
                                         std::to_string(trainers_[rank]->pid) + " on " + trainers_[rank]->host +
                                         ", which has not been found lost; retrying"));
      }
      return;
    }
    if (state_ != State::kWaiting && !job_.runtime.recover_lost_trainers) {
      r.ReplyError(Status::FailedPrecondition("the job has already started; late trainers cannot join it"));
      return;
    }
    TrainerMember m;
    m.host = req.host;
    m.pid = req.pid;
    m.last_seen = Clock::now();
    m.incarnation = next_incarnation_++;
    m.stepped_at = m.last_seen;
    m.routing_id = r.routing_id();
    LOG(INFO) << "trainer " << rank << " registered (host " << m.host << ", pid " << m.pid << ")"
              << (state_ == State::kWaiting ? "" : " in place of the lost one");
    reply.incarnation = m.incarnation;
    reply.rank = rank;
    trainers_[rank] = std::move(m);
  }
  // A member of a lost master says which generation it ran: this master's
  // generations go on above it, so requests of the old plan stay refused.
  if (state_ == State::kWaiting) generation_ = std::max(generation_, req.generation);
  cv_.notify_all();
  r.Reply(EncodeJsonReply(r.request_header(), reply.ToJson()));
}

void Master::HandleHeartbeat(const HeartbeatRequest& req, Responder& r) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (req.master_id != 0 && req.master_id != master_id_) {
    // Its master died and this one took over (--recover): not a stranger,
    // and not fenced either; it registers again.
    r.ReplyError(Status::FailedPrecondition("registered with another master of this address (" +
                                            std::to_string(req.master_id) + "), which is gone: register again"));
    return;
  }
  if (req.role == "ps") {
    auto it = ps_.find(req.rank);
    if (it == ps_.end()) {
      // A server the master dropped (it was silent too long): refused, so
      // it stops.
      r.ReplyError(Status::NotFound("ps " + std::to_string(req.rank) + " is not a member of this job"));
      return;
    }
    if (Status sender = CheckSender(r, Role::kPs, it->second.routing_id, "ps " + std::to_string(req.rank));
        !sender.ok()) {
      r.ReplyError(sender);
      return;
    }
    it->second.last_seen = now;
    it->second.ready = true;
    if (!req.stats.is_null()) it->second.stats = req.stats;
  } else {
    if (Status member = CheckTrainer(TrainerId{req.rank, req.incarnation}, r); !member.ok()) {
      r.ReplyError(member);
      return;
    }
    TrainerMember& t = *trainers_[req.rank];
    t.last_seen = now;
    if (req.steps_done != t.steps_done) {
      t.steps_done = req.steps_done;
      t.stepped_at = now;
    }
    // A step of a generation that is over is never completed: not counted.
    if (req.progress && req.progress->generation == generation_) {
      Progress& pr = progress_[req.progress->step];
      pr.reported++;
      pr.loss_sum += req.progress->loss * req.progress->examples;
      pr.examples += req.progress->examples;
      pr.examples_per_s += req.progress->examples_per_s;
      pr.epoch = std::max(pr.epoch, req.progress->epoch);
      pr.total_steps = std::max(pr.total_steps, req.progress->total_steps);
      PrintProgress();
    }
  }
  HeartbeatReply reply;
  reply.state = state_ == State::kAborted      ? "aborted"
                : state_ == State::kDone       ? "done"
                : state_ == State::kRunning    ? "running"
                : state_ == State::kRecovering ? "recovering"
                                               : "waiting";
  // Trainers of an older generation drop their step and wait for this one.
  reply.generation = generation_;
  reply.promoted = generation_promoted_;
  if (state_ == State::kAborted) reply.reason = abort_reason_.message();
  if (checkpoint_requested_id_ > checkpoint_served_id_) reply.checkpoint = checkpoint_requested_id_;
  r.Reply(EncodeJsonReply(r.request_header(), reply.ToJson()));
}

void Master::HandleWaitStart(const WaitStartRequest& req, Responder& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status member = CheckTrainer(req.trainer, r); !member.ok()) {
    r.ReplyError(member);
    return;
  }
  // The generation the trainer ran last (0: none): it waits for a newer one.
  if (state_ == State::kAborted) {
    r.ReplyError(abort_reason_);
  } else if (state_ == State::kRunning && generation_ > req.generation) {
    r.Reply(StartReply(r.request_header()));
  } else {
    start_waiters_.push_back(StartWaiter{req.generation, req.trainer, std::move(r)});
  }
}

Status Master::CheckTrainer(const TrainerId& trainer) const {
  const int rank = trainer.rank;
  if (rank >= static_cast<int>(trainers_.size()) || !trainers_[rank]) {
    return Status::NotFound("trainer " + std::to_string(rank) + " is not a member of this job");
  }
  if (trainers_[rank]->incarnation != trainer.incarnation) {
    return Status::NotFound("trainer " + std::to_string(rank) + " (registration " +
                            std::to_string(trainer.incarnation) +
                            ") was replaced after it was found lost: it is not a member of this job");
  }
  return Status::OK();
}

Status Master::CheckTrainer(const TrainerId& trainer, const Responder& sender) const {
  TESSERA_RETURN_IF_ERROR(CheckTrainer(trainer));
  return CheckSender(sender, Role::kTrainer, trainers_[trainer.rank]->routing_id,
                     "trainer " + std::to_string(trainer.rank));
}

bool Master::IsTrainerConnection(const Responder& sender) const {
  if (sender.peer_role() != Role::kNone && sender.peer_role() != Role::kTrainer) return false;
  for (const auto& t : trainers_) {
    if (t && t->routing_id == sender.routing_id()) return true;
  }
  return false;
}

std::vector<std::string> Master::TrainerConnections() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  for (const auto& t : trainers_) ids.push_back(t ? t->routing_id : std::string());
  return ids;
}

void Master::HandleCommand(const Command& command, Responder& r) {
  // An operator's order (with keys: only the operator key's holder), or a
  // server asking to leave (remove_ps of itself, from its own connection).
  bool allowed = r.peer_role() == Role::kOperator;
  if (!allowed && command.command == "remove_ps") {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ps_.find(command.ps);
    allowed = it != ps_.end() && CheckSender(r, Role::kPs, it->second.routing_id, "").ok();
  }
  // Without keys no one can prove to be the operator: commands are open,
  // as everything else on a plain socket is to whoever reaches it.
  if (!allowed && r.peer_role() == Role::kNone && !options_.keys) allowed = true;
  if (!allowed) {
    r.ReplyError(Status::PermissionDenied("COMMAND " + command.command +
                                          ": only the operator (--keys with operator.secret) may give it"));
    return;
  }
  Status st;
  const std::string why = command.why.empty() ? "requested by a COMMAND" : command.why;
  if (command.command == "checkpoint") {
    st = RequestCheckpoint(why);
  } else {
    st = RequestRemoveServer(command.ps, why);
  }
  if (st.ok()) {
    r.ReplyOk();
  } else {
    r.ReplyError(st);
  }
}

void Master::HandleReportDone(const ReportDone& done, Responder& r) {
  const int rank = done.trainer.rank;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status member = CheckTrainer(done.trainer, r); !member.ok()) {
      r.ReplyError(member);
      return;
    }
    trainers_[rank]->done = true;
    trainers_[rank]->report = done.report;
    trainers_[rank]->last_seen = Clock::now();
  }
  r.ReplyOk();
  if (!done.ok) {
    // Often the consequence of another member's death (a broken allreduce):
    // the monitor waits a heartbeat timeout for that cause before it blames
    // this report.
    std::lock_guard<std::mutex> lock(mu_);
    if (reported_failure_.empty()) {
      reported_failure_ = "trainer " + std::to_string(rank) + " failed: " + done.error;
      reported_failure_at_ = Clock::now();
    }
  }
  cv_.notify_all();
}

void Master::HandleCheckpointBarrier(Message&& m, Responder r) {
  auto body = DecodeJsonFrame(m, 0);
  if (!body.ok() || m.frames.size() > 2) {
    r.ReplyError(Status::InvalidArgument("CHECKPOINT_BARRIER: expected JSON {rank, incarnation, step, generation} "
                                         "[TrainerState]"));
    return;
  }
  auto req = BarrierRequest::Parse(*body);
  if (!req.ok()) {
    r.ReplyError(req.status());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status member = CheckTrainer(req->trainer, r); !member.ok()) {
      r.ReplyError(member);
      return;
    }
    if (state_ != State::kRunning || req->generation != generation_) {
      // The trainer's generation is over (a member was lost): it starts over.
      r.ReplyError(Status::Cancelled("the job's servers changed (generation " + std::to_string(generation_) + ")"));
      return;
    }
    if (m.frames.size() == 2) barrier_state_ = m.frames[1].to_string();
    // Waiting at a boundary is not a stall.
    trainers_[req->trainer.rank]->last_seen = Clock::now();
    trainers_[req->trainer.rank]->stepped_at = Clock::now();
    barrier_.Arrive(req->trainer.rank, req->step, std::move(r));
  }
  cv_.notify_all();
}

}  // namespace tessera
