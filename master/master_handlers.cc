// The master's request handlers: registration, heartbeats, start, done, and
// the rendezvous store. They run on the RPC server's I/O thread, so each only
// takes the lock, updates membership and answers (or parks the answer).
#include <algorithm>

#include <glog/logging.h>

#include "common/messages.h"
#include "master/master.h"

namespace tessera {

using nlohmann::json;

void Master::Handle(Message&& m, Responder r) {
  const Opcode op = m.header.op;
  if (op == Opcode::kStoreSet || op == Opcode::kStoreGet) {
    if (m.frames.empty() || m.frames.size() > 2 || (op == Opcode::kStoreSet) != (m.frames.size() == 2)) {
      r.ReplyError(Status::InvalidArgument("store request: expected Key [Value] frames"));
      return;
    }
    const std::string key = m.frames[0].to_string();
    if (op == Opcode::kStoreSet) {
      store_.Set(key, m.frames[1].to_string());
      r.ReplyOk();
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
  try {
    switch (op) {
      case Opcode::kCommand: HandleCommand(*body, r); return;
      case Opcode::kRegister: HandleRegister(*body, r); return;
      case Opcode::kHeartbeat: HandleHeartbeat(*body, r); return;
      case Opcode::kWaitStart: HandleWaitStart(*body, r); return;
      case Opcode::kReportDone: HandleReportDone(*body, r); return;
      default:
        r.ReplyError(Status::Unimplemented(std::string("the master does not handle ") + OpcodeName(op)));
    }
  } catch (const json::exception& e) {
    // The handlers read the body before they change anything or answer, so
    // a throw leaves the master as it was and the request unanswered.
    if (r.valid()) r.ReplyError(Status::InvalidArgument(std::string(OpcodeName(op)) + ": malformed body: " + e.what()));
  }
}

void Master::HandleRegister(const json& body, Responder& r) {
  const std::string role = body.at("role").get<std::string>();
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kDone || state_ == State::kAborted) {
    r.ReplyError(Status::FailedPrecondition("the job has ended"));
    return;
  }
  json reply = {{"heartbeat_ms", job_.runtime.heartbeat_ms},
                {"peer_timeout_ms", job_.runtime.peer_timeout_ms},
                {"master_reconnect_ms", job_.runtime.master_reconnect_ms},
                {"master_id", master_id_}};
  // A member of a lost master says which generation it ran: this master's
  // generations go on above it, so requests of the old plan stay refused.
  const int64_t member_generation = body.value("generation", int64_t{0});
  if (role == "ps") {
    const bool started = state_ != State::kWaiting;
    if (!started && !options_.recover && static_cast<int>(ps_.size()) >= job_.cluster.num_ps) {
      r.ReplyError(Status::FailedPrecondition("the job needs only " + std::to_string(job_.cluster.num_ps) +
                                              " parameter server(s), all registered"));
      return;
    }
    if (started && job_.checkpoint.dir.empty()) {
      // A server joins at a step boundary through a checkpoint.
      r.ReplyError(Status::FailedPrecondition(
          "the job is running and has no checkpoint.dir: servers can join a running job only through a checkpoint"));
      return;
    }
    PsMember m;
    m.endpoint = body.at("endpoint").get<std::string>();
    m.host = body.value("host", "");
    m.memory_bytes = body.value("memory_bytes", int64_t{0});
    m.pid = body.value("pid", int64_t{0});
    m.last_seen = Clock::now();
    const int id = next_ps_id_++;
    reply["rank"] = id;
    LOG(INFO) << "parameter server " << id << " registered: " << m.endpoint << " (host " << m.host << ", pid " << m.pid
              << ")" << (started ? "; it joins the running job at the next step boundary" : "");
    ps_[id] = std::move(m);
  } else if (role == "trainer") {
    const int rank = body.at("rank").get<int>();
    const int world = body.at("world").get<int>();
    if (world != job_.cluster.num_trainers || rank < 0 || rank >= world) {
      r.ReplyError(Status::InvalidArgument("trainer says rank " + std::to_string(rank) + " of world " +
                                           std::to_string(world) + ", but the job has " +
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
    m.host = body.value("host", "");
    m.pid = body.value("pid", int64_t{0});
    m.last_seen = Clock::now();
    m.incarnation = next_incarnation_++;
    LOG(INFO) << "trainer " << rank << " registered (host " << m.host << ", pid " << m.pid << ")"
              << (state_ == State::kWaiting ? "" : " in place of the lost one");
    reply["incarnation"] = m.incarnation;
    trainers_[rank] = std::move(m);
    reply["rank"] = rank;
  } else {
    r.ReplyError(Status::InvalidArgument("unknown role '" + role + "'"));
    return;
  }
  if (state_ == State::kWaiting) generation_ = std::max(generation_, member_generation);
  cv_.notify_all();
  r.Reply(EncodeJsonReply(r.request_header(), reply));
}

void Master::HandleHeartbeat(const json& body, Responder& r) {
  const std::string role = body.at("role").get<std::string>();
  const int rank = body.at("rank").get<int>();
  std::optional<int64_t> step;
  int64_t step_generation = 0;
  double loss = 0, examples = 1, examples_per_s = 0;
  if (role == "trainer" && body.contains("progress")) {
    const json& p = body["progress"];
    step = p.at("step").get<int64_t>();
    step_generation = p.value("generation", int64_t{0});
    loss = p.at("loss").get<double>();
    examples = p.value("examples", 1.0);
    examples_per_s = p.at("examples_per_s").get<double>();
  }
  const int64_t member_of = body.value("master_id", int64_t{0});
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (member_of != 0 && member_of != master_id_) {
    // Its master died and this one took over (--recover): not a stranger,
    // and not fenced either; it registers again.
    r.ReplyError(Status::FailedPrecondition("registered with another master of this address (" +
                                            std::to_string(member_of) + "), which is gone: register again"));
    return;
  }
  if (role == "ps" && ps_.count(rank) > 0) {
    // A server the master dropped (it was silent too long) is not found
    // here: its heartbeat is refused and it stops.
    ps_[rank].last_seen = now;
    if (body.contains("stats")) ps_[rank].stats = body["stats"];
  } else if (role == "trainer") {
    if (Status member = CheckTrainer(body); !member.ok()) {
      r.ReplyError(member);
      return;
    }
    trainers_[rank]->last_seen = now;
    // A step of a generation that is over is never completed: not counted.
    if (step && step_generation == generation_) {
      Progress& pr = progress_[*step];
      pr.reported++;
      pr.loss_sum += loss * examples;
      pr.examples += examples;
      pr.examples_per_s += examples_per_s;
      PrintProgress();
    }
  } else {
    r.ReplyError(Status::NotFound(role + " " + std::to_string(rank) + " is not a member of this job"));
    return;
  }
  const char* state = state_ == State::kAborted      ? "aborted"
                      : state_ == State::kDone       ? "done"
                      : state_ == State::kRunning    ? "running"
                      : state_ == State::kRecovering ? "recovering"
                                                     : "waiting";
  // Trainers of an older generation drop their step and wait for this one.
  json reply = {{"state", state}, {"generation", generation_}};
  if (state_ == State::kAborted) reply["reason"] = abort_reason_.message();
  if (checkpoint_requested_id_ > checkpoint_served_id_) reply["checkpoint"] = checkpoint_requested_id_;
  r.Reply(EncodeJsonReply(r.request_header(), reply));
}

void Master::HandleWaitStart(const json& body, Responder& r) {
  // The generation the trainer ran last (0: none): it waits for a newer one.
  const int64_t after = body.value("generation", int64_t{0});
  std::lock_guard<std::mutex> lock(mu_);
  if (Status member = CheckTrainer(body); !member.ok()) {
    r.ReplyError(member);
    return;
  }
  if (state_ == State::kAborted) {
    r.ReplyError(abort_reason_);
  } else if (state_ == State::kRunning && generation_ > after) {
    r.Reply(StartReply(r.request_header()));
  } else {
    start_waiters_.push_back(StartWaiter{after, body, std::move(r)});
  }
}

Status Master::CheckTrainer(const json& body) const {
  // Also called outside the JSON handlers' catch (the barrier): it throws
  // on no body.
  const auto rank_field = body.find("rank");
  const auto incarnation_field = body.find("incarnation");
  if (rank_field == body.end() || !rank_field->is_number_integer()) {
    return Status::InvalidArgument("a trainer's request without an integer rank");
  }
  if (incarnation_field == body.end() || !incarnation_field->is_number_integer()) {
    return Status::InvalidArgument("a trainer's request without its registration (incarnation)");
  }
  const int64_t rank64 = rank_field->get<int64_t>();
  const int rank = rank64 < 0 || rank64 > 1000000 ? -1 : static_cast<int>(rank64);
  const int64_t incarnation = incarnation_field->get<int64_t>();
  if (rank < 0 || rank >= static_cast<int>(trainers_.size()) || !trainers_[rank]) {
    return Status::NotFound("trainer " + std::to_string(rank) + " is not a member of this job");
  }
  if (trainers_[rank]->incarnation != incarnation) {
    return Status::NotFound("trainer " + std::to_string(rank) + " (registration " + std::to_string(incarnation) +
                            ") was replaced after it was found lost: it is not a member of this job");
  }
  return Status::OK();
}

void Master::HandleCommand(const json& body, Responder& r) {
  const std::string command = body.at("command").get<std::string>();
  Status st;
  if (command == "checkpoint") {
    st = RequestCheckpoint("requested by a COMMAND");
  } else if (command == "remove_ps") {
    st = RequestRemoveServer(body.at("ps").get<int>(), body.value("why", std::string("requested by a COMMAND")));
  } else {
    st = Status::InvalidArgument("unknown command '" + command + "' (known: checkpoint, remove_ps)");
  }
  if (st.ok()) {
    r.ReplyOk();
  } else {
    r.ReplyError(st);
  }
}

void Master::HandleReportDone(const json& body, Responder& r) {
  const int rank = body.at("rank").get<int>();
  const bool ok = body.value("ok", false);
  const std::string error = body.value("error", std::string("unknown error"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status member = CheckTrainer(body); !member.ok()) {
      r.ReplyError(member);
      return;
    }
    trainers_[rank]->done = true;
    trainers_[rank]->report = body;
    trainers_[rank]->last_seen = Clock::now();
  }
  r.ReplyOk();
  if (!ok) {
    // Often the consequence of another member's death (a broken allreduce):
    // the monitor waits a heartbeat timeout for that cause before it blames
    // this report.
    std::lock_guard<std::mutex> lock(mu_);
    if (reported_failure_.empty()) {
      reported_failure_ = "trainer " + std::to_string(rank) + " failed: " + error;
      reported_failure_at_ = Clock::now();
    }
  }
  cv_.notify_all();
}

}  // namespace tessera

namespace tessera {

void Master::HandleCheckpointBarrier(Message&& m, Responder r) {
  auto body = DecodeJsonFrame(m, 0);
  if (!body.ok() || m.frames.size() > 2 || !body->contains("rank") || !body->contains("step") ||
      !body->at("rank").is_number_integer() || !body->at("step").is_number_integer()) {
    r.ReplyError(Status::InvalidArgument("checkpoint barrier: expected JSON {rank, step} [TrainerState]"));
    return;
  }
  const int rank = body->value("rank", -1);
  const int64_t step = body->value("step", int64_t{-1});
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (step < 0 || !CheckTrainer(*body).ok()) {
      r.ReplyError(Status::InvalidArgument("checkpoint barrier from an unknown trainer or step"));
      return;
    }
    const int64_t generation = body->value("generation", generation_);
    if (state_ != State::kRunning || generation != generation_) {
      // The trainer's generation is over (a server was lost): it starts over.
      r.ReplyError(Status::Cancelled("the job's servers changed (generation " + std::to_string(generation_) + ")"));
      return;
    }
    if (m.frames.size() == 2) barrier_state_ = m.frames[1].to_string();
    trainers_[rank]->last_seen = Clock::now();
    barrier_.Arrive(rank, step, std::move(r));
  }
  cv_.notify_all();
}

}  // namespace tessera
