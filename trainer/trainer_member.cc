#include "trainer/trainer_member.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <glog/logging.h>

#include "common/master_registration.h"
#include "common/messages.h"
#include "common/sharding_plan.h"

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

StatusOr<std::unique_ptr<TrainerMember>> TrainerMember::Connect(const TrainerMemberOptions& options) {
  if (options.master.empty()) return Status::InvalidArgument("the master's address is required (--master)");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return Status::InvalidArgument("the rank must be in [0, world): rank " + std::to_string(options.rank) +
                                   ", world " + std::to_string(options.world));
  }
  std::unique_ptr<TrainerMember> m(new TrainerMember());
  m->options_ = options;
  TESSERA_ASSIGN_OR_RETURN(m->client_, RpcClient::Create(options.keys));
  TESSERA_ASSIGN_OR_RETURN(m->master_peer_, m->client_->Connect(options.master, Role::kMaster));
  m->server_peers_ = std::make_unique<PeerPool<std::string>>(m->client_.get(), Role::kPs);
  return m;
}

TrainerMember::~TrainerMember() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_heartbeat_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status TrainerMember::Join() {
  TESSERA_RETURN_IF_ERROR(Register());
  heartbeat_ = std::thread(&TrainerMember::HeartbeatLoop, this);
  return Status::OK();
}

Status TrainerMember::Register() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  RegisterRequest req;
  req.role = "trainer";
  req.rank = options_.rank;
  req.world = options_.world;
  req.host = host;
  req.pid = static_cast<int64_t>(getpid());
  req.generation = running_generation_.load();
  TESSERA_ASSIGN_OR_RETURN(json j, RegisterWithMaster(client_.get(), master_peer_, options_.master, req.ToJson(),
                                                      milliseconds(options_.register_timeout_ms)));
  TESSERA_ASSIGN_OR_RETURN(RegisterReply reply, RegisterReply::Parse(j));
  heartbeat_ms_ = reply.heartbeat_ms;
  incarnation_ = reply.incarnation;
  master_id_ = reply.master_id;
  peer_timeout_ms_ = reply.peer_timeout_ms;
  master_reconnect_ms_ = reply.master_reconnect_ms;
  LOG(INFO) << "trainer " << options_.rank << "/" << options_.world << " registered with " << options_.master;
  return Status::OK();
}

TrainerId TrainerMember::Id() const { return TrainerId{options_.rank, incarnation_.load()}; }

StatusOr<TrainerMember::GenerationStart> TrainerMember::WaitStart(int64_t after) {
  // The master answers once every member has registered and the shards exist
  // (or, after a change of the servers, once the new ones hold their rows).
  WaitStartRequest req;
  req.trainer = Id();
  req.generation = after;
  auto reply = client_->CallSync(master_peer_, EncodeJson(Opcode::kWaitStart, req.ToJson()),
                                 milliseconds(24LL * 3600 * 1000));
  if (!reply.ok()) return reply.status().WithContext("waiting for the job to start");
  TESSERA_ASSIGN_OR_RETURN(json j, DecodeJsonFrame(*reply, 0));
  TESSERA_ASSIGN_OR_RETURN(StartInfo info, StartInfo::Parse(j));
  GenerationStart start{std::move(info), ""};
  // Starting from a checkpoint: its trainer state follows the JSON.
  if (reply->frames.size() == 2) start.state_bytes = reply->frames[1].to_string();
  return start;
}

void TrainerMember::CancelServerCalls(const Status& why) {
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers = generation_peers_;
  }
  for (int peer : peers) client_->CancelCalls(peer, why);
}

bool TrainerMember::AwaitNewGeneration(int64_t generation) {
  // The master notices a lost member within its peer timeout.
  const auto grace = milliseconds(peer_timeout_ms_ + 4 * heartbeat_ms_);
  auto give_up = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < give_up) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_.ok()) return false;
    }
    if (master_generation_.load() > generation) return true;
    // A master that recovers (or one that is being replaced) bounds that
    // itself: it aborts the job, or the heartbeat gives up on it.
    if (!master_settled_.load()) give_up = std::chrono::steady_clock::now() + grace;
    std::this_thread::sleep_for(milliseconds(std::min<int64_t>(heartbeat_ms_, 50)));
  }
  return false;
}

bool TrainerMember::AwaitMasterChange(int64_t changes) {
  const auto give_up = std::chrono::steady_clock::now() + milliseconds(4 * heartbeat_ms_ + 2000);
  while (std::chrono::steady_clock::now() < give_up) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_.ok()) return false;
    }
    if (master_changes_.load() != changes) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

void TrainerMember::SendProgress(const TrainerProgress& progress) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_progress_ = progress;
  }
  cv_.notify_all();
}

void TrainerMember::HeartbeatLoop() {
  auto last_contact = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, milliseconds(heartbeat_ms_),
                 [this] { return stop_heartbeat_ || pending_progress_.has_value(); });
    if (stop_heartbeat_) return;
    HeartbeatRequest beat;
    beat.role = "trainer";
    beat.rank = options_.rank;
    beat.incarnation = incarnation_.load();
    beat.master_id = master_id_.load();
    beat.steps_done = steps_done_.load();
    beat.progress = pending_progress_;
    pending_progress_.reset();
    lock.unlock();
    auto reply =
        client_->CallSync(master_peer_, EncodeJson(Opcode::kHeartbeat, beat.ToJson()), milliseconds(heartbeat_ms_ * 2));
    const auto now = std::chrono::steady_clock::now();
    Status fatal;
    if (reply.ok()) {
      last_contact = now;
      auto j = DecodeJson(*reply);
      auto answer = j.ok() ? HeartbeatReply::Parse(*j) : StatusOr<HeartbeatReply>(j.status());
      if (!answer.ok()) LOG(WARNING) << "trainer " << options_.rank << ": a heartbeat reply: " << answer.status();
      if (answer.ok() && answer->state == "aborted") {
        fatal = Status::Aborted("the master aborted the job: " +
                                (answer->reason.empty() ? std::string("(no reason given)") : answer->reason));
      }
      master_settled_ = answer.ok() && answer->state == "running";
      if (answer.ok() && answer->checkpoint > 0) {
        checkpoint_requested_id_ = std::max<int64_t>(checkpoint_requested_id_, answer->checkpoint);
        checkpoint_requested_ = checkpoint_requested_id_.load() > checkpoint_served_id_.load();
      }
      const int64_t generation = answer.ok() ? answer->generation : 0;
      const bool promoted = answer.ok() && answer->promoted;
      if (generation > master_generation_.load()) {
        master_generation_ = generation;
        const int64_t running = running_generation_.load();
        if (running > 0 && generation > running && !promoted) {
          // A server was lost: this step's requests may never be answered.
          LOG(WARNING) << "trainer " << options_.rank << ": the job moved to generation " << generation
                       << "; dropping the step in flight";
          stop_training_ = true;
          CancelServerCalls(Status::Cancelled("the job's servers changed (generation " + std::to_string(generation) +
                                              ")"));
        }
      }
      // Backups took over a lost server's shards: the step goes on, its
      // requests in flight are sent again under the new plan. Until the
      // training thread has taken it, what it sends is cancelled too.
      if (promoted && generation > running_generation_.load() && running_generation_.load() > 0) {
        CancelServerCalls(Status::Cancelled("a lost server's backups took over (generation " +
                                            std::to_string(generation) + ")"));
      }
    } else if (reply.status().code() == StatusCode::kFailedPrecondition) {
      // The master died and another took over its address (--recover): join
      // it. What was asked of the old one is never answered: cancelled, and
      // asked again of the new one.
      LOG(WARNING) << "trainer " << options_.rank << ": " << reply.status().message();
      master_settled_ = false;
      Status again = Register();
      if (again.ok()) {
        last_contact = std::chrono::steady_clock::now();
        ++master_changes_;
        client_->CancelCalls(master_peer_, Status::Cancelled("the master was replaced"));
      } else {
        fatal = again.WithContext("registering with the master that took over");
      }
    } else if (reply.status().code() != StatusCode::kDeadlineExceeded) {
      fatal = Status::Aborted("the master rejected a heartbeat: " + reply.status().ToString());
    } else if (now - last_contact > milliseconds(master_reconnect_ms_)) {
      fatal = Status::Unavailable("lost contact with the master " + options_.master + " for over " +
                                  std::to_string(master_reconnect_ms_) + " ms (runtime.master_reconnect_ms; " +
                                  client_->DescribeLink(master_peer_) + ")");
    } else if (now - last_contact > milliseconds(peer_timeout_ms_) && master_settled_.exchange(false)) {
      LOG(WARNING) << "trainer " << options_.rank << ": no answer from the master " << options_.master
                   << "; retrying for up to " << master_reconnect_ms_ << " ms (a master restarted with --recover "
                   << "takes the job over); the last heartbeat: " << reply.status() << "; "
                   << client_->DescribeLink(master_peer_);
    }
    if (!fatal.ok()) {
      LOG(ERROR) << "trainer " << options_.rank << ": " << fatal;
      {
        std::lock_guard<std::mutex> fatal_lock(mu_);
        fatal_ = fatal;
      }
      stop_training_ = true;
      CancelServerCalls(fatal);
      if (options_.on_fatal) options_.on_fatal(fatal);
      return;
    }
    lock.lock();
  }
}

StatusOr<EmbeddingRoute> TrainerMember::FollowPromotion(int64_t* generation, const Status& why) {
  // Already on the newest plan, which a promotion made: a call cancelled
  // by a heartbeat that had not seen this trainer take it goes again.
  if (master_generation_.load() <= *generation && promoted_route_ &&
      promoted_route_->plan.version == static_cast<uint32_t>(*generation)) {
    return *promoted_route_;
  }
  // The master finds the lost server (about runtime.connection_loss_ms for
  // a dead one) and publishes the plan its backups serve.
  if (!AwaitNewGeneration(*generation)) {
    return Status(why.code(), why.message() + "; and the master started no new generation");
  }
  TESSERA_ASSIGN_OR_RETURN(GenerationStart start, WaitStart(*generation));
  if (!start.info.promoted) {
    // A rollback: this generation is over (the next one starts).
    return Status::Cancelled("the job's servers changed (generation " + std::to_string(start.info.generation) +
                             "): it rolls back");
  }
  TESSERA_ASSIGN_OR_RETURN(EmbeddingRoute route, EnterGeneration(start.info));
  *generation = start.info.generation;
  running_generation_ = *generation;
  LOG(WARNING) << "trainer " << options_.rank << ": a lost server's backups took over; generation " << *generation
               << ", the step goes on";
  promoted_route_ = std::move(route);
  return *promoted_route_;
}

StatusOr<TrainerMember::GenerationStart> TrainerMember::NextGeneration(int64_t after) {
  for (;;) {
    const int64_t changes = master_changes_.load();
    auto start = WaitStart(after);
    if (!start.ok()) {
      // Asked of a master that died, or of its successor before this trainer
      // registered with it: ask again once registered.
      if (AwaitMasterChange(changes)) continue;
      return start.status();
    }
    running_generation_ = start->info.generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_.ok()) return fatal_;
      stop_training_ = false;
    }
    return start;
  }
}

StatusOr<EmbeddingRoute> TrainerMember::EnterGeneration(const StartInfo& info) {
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::FromJson(info.plan));
  // Lost or removed servers' connections close.
  server_peers_->ForgetAllBut(info.ps_endpoints);
  std::vector<int> peers;
  for (const std::string& e : info.ps_endpoints) {
    TESSERA_ASSIGN_OR_RETURN(int peer, server_peers_->Get(e, e));
    peers.push_back(peer);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_peers_ = peers;
  }
  return EmbeddingRoute{std::move(plan), std::move(peers)};
}

EmbeddingClientOptions TrainerMember::ClientOptions(const JobConfig& job, int64_t* generation) {
  EmbeddingClientOptions eo;
  eo.trainer = static_cast<uint32_t>(options_.rank);
  eo.timeout = milliseconds(job.runtime.rpc_timeout_ms);
  eo.row_replies = job.training.row_replies;
  eo.plan_independent_pooling = job.training.plan_independent_pooling;
  eo.forward_bf16 = job.training.forward_precision == CommPrecision::kBf16;
  eo.backward_bf16 = job.training.backward_precision == CommPrecision::kBf16;
  if (job.cluster.replicas >= 2) {
    eo.reroute = [this, generation](const Status& why) { return FollowPromotion(generation, why); };
    eo.plan_replaced = [this, generation] { return master_generation_.load() > *generation; };
  }
  return eo;
}

Status TrainerMember::Barrier(int64_t step, const int64_t* generation,
                              const std::function<StatusOr<std::string>()>& state, EmbeddingClient* embeddings,
                              const std::function<void()>& arrived, int64_t timeout_ms) {
  StatusOr<Message> reply = Status::Internal("no barrier attempt");
  for (int attempt = 0;; ++attempt) {
    BarrierRequest req;
    req.trainer = Id();
    req.step = step;
    req.generation = *generation;  // moved on by a reroute (below)
    Message m = EncodeJson(Opcode::kCheckpointBarrier, req.ToJson());
    if (options_.rank == 0) {
      TESSERA_ASSIGN_OR_RETURN(std::string bytes, state());
      m.AddString(bytes);
    }
    // Waits while the others arrive and every server snapshots.
    RpcFuture pending = client_->Call(master_peer_, std::move(m), milliseconds(timeout_ms));
    if (arrived) arrived();
    reply = pending.Wait();
    if (reply.ok()) break;
    // A server lost at the barrier whose backups took over: arrive again,
    // in the new generation.
    if (embeddings == nullptr || attempt >= 3 || !embeddings->Reroute(reply.status()).ok()) {
      return reply.status().WithContext("checkpoint barrier at step " + std::to_string(step));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(json j, DecodeJson(*reply));
  TESSERA_ASSIGN_OR_RETURN(BarrierReply answer, BarrierReply::Parse(j));
  checkpoint_served_id_ = std::max<int64_t>(checkpoint_served_id_, answer.served);
  checkpoint_requested_ = checkpoint_requested_id_.load() > checkpoint_served_id_.load();
  if (answer.action == "restart") {
    // The servers changed at this boundary; the next generation starts here.
    const int64_t next = std::max(answer.generation, *generation + 1);
    int64_t seen = master_generation_.load();
    while (seen < next && !master_generation_.compare_exchange_weak(seen, next)) {
    }
    return Status::Cancelled("the job's servers change at step " + std::to_string(step));
  }
  return Status::OK();
}

Status TrainerMember::fatal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

Status TrainerMember::ReportDone(json report, Status st) {
  Status why = fatal();
  if (!why.ok()) st = why;
  report["rank"] = options_.rank;
  report["incarnation"] = incarnation_.load();  // REPORT_DONE: the report plus the TrainerId
  report["ok"] = st.ok();
  if (!st.ok()) report["error"] = st.ToString();
  auto reply = client_->CallSync(master_peer_, EncodeJson(Opcode::kReportDone, report), milliseconds(10000));
  if (!reply.ok()) LOG(WARNING) << "could not report to the master: " << reply.status();
  return st;
}

}  // namespace tessera
