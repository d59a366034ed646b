#include "python/src/trainer_session.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <glog/logging.h>

#include "common/net_address.h"
#include "common/param_file.h"

namespace tessera {

using Clock = std::chrono::steady_clock;

StatusOr<std::unique_ptr<TrainerSession>> TrainerSession::Open(const TrainerSessionOptions& options) {
  if (options.keys_dir.empty() && !options.insecure) {
    return Status::InvalidArgument(
        "the job's keys are required (keys=DIR, from scripts/make_job_keys.sh), or insecure=True for plain TCP");
  }
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const JobKeys> keys,
                           KeysFromFlags(options.keys_dir, options.insecure, Role::kTrainer));
  std::unique_ptr<TrainerSession> s(new TrainerSession());
  s->options_ = options;
  // Before joining: a port that cannot be bound leaves no trainer missing
  // from the job, as it stops a C++ trainer before it registers.
  TESSERA_ASSIGN_OR_RETURN(s->metrics_,
                           SessionMetrics::Start(options.metrics_address, options.metrics_port, options.rank));
  TrainerMemberOptions mo;
  mo.keys = std::move(keys);
  mo.master = options.master;
  mo.rank = options.rank;
  mo.world = options.world;
  mo.register_timeout_ms = options.register_timeout_ms;
  TESSERA_ASSIGN_OR_RETURN(s->member_, TrainerMember::Connect(mo));
  TESSERA_RETURN_IF_ERROR(s->member_->Join());
  TESSERA_ASSIGN_OR_RETURN(TrainerMember::GenerationStart start, s->member_->NextGeneration(0));
  s->start_step_ = s->step_ = start.info.start_step;
  Status st = s->Enter(start, /*restart=*/true);
  if (!st.ok()) return s->member_->ReportDone(nlohmann::json::object(), st);
  s->window_start_ = s->run_start_ = s->timed_start_ = Clock::now();
  // As TrainingLoop: a tenth of the steps, at most 20 (20 when the job
  // counts epochs, which this side cannot turn into steps).
  const int64_t steps = s->job_.training.steps;
  s->warmup_steps_ = steps > 0 ? std::min<int64_t>((steps - s->start_step_) / 10, 20) : 20;
  return s;
}

Status TrainerSession::Enter(const TrainerMember::GenerationStart& start, bool restart) {
  TESSERA_ASSIGN_OR_RETURN(JobConfig job, ParseJobConfigJson(start.info.job, ""));
  TESSERA_ASSIGN_OR_RETURN(EmbeddingRoute route, member_->EnterGeneration(start.info));
  if (restart) {
    TESSERA_ASSIGN_OR_RETURN(DataParallelTables local, DataParallelTables::Create(job, route.plan));
    std::string user_state = start.state_bytes;
    // Checkpoints of Python jobs before data-parallel tables kept
    // save_state's bytes alone; since then, a param file around them.
    if (HasParamsMagic(start.state_bytes)) {
      TESSERA_ASSIGN_OR_RETURN(std::vector<ParamArray> state,
                               DecodeParams(start.state_bytes, "the checkpoint's trainer state"));
      const ParamArray* saved = FindParam(state, "python.state");
      if (saved == nullptr || saved->type != ParamArray::Type::kBytes) {
        return Status::DataLoss("the checkpoint's trainer state holds no Python trainer state (python.state)");
      }
      user_state = saved->bytes;
      TESSERA_RETURN_IF_ERROR(local.Import(state));
    } else if (!start.state_bytes.empty() && !local.empty()) {
      return Status::DataLoss("the checkpoint's trainer state lacks the rows of the job's data-parallel tables");
    }
    local_ = std::make_unique<DataParallelTables>(std::move(local));
    // A trainer may be a new process: the collective meets again.
    TESSERA_RETURN_IF_ERROR(RunInTurn(TakeSumTicket(), [this] {
      collective_.reset();
      sum_failure_ = Status::OK();
      return Status::OK();
    }));
    start_state_ = std::move(user_state);
  }
  if (store_ == nullptr) {
    store_ = std::make_unique<MasterStore>(member_->client(), member_->master_peer(),
                                           std::chrono::milliseconds(job.runtime.rpc_timeout_ms));
  }
  job_ = std::move(job);
  generation_ = start.info.generation;
  dump_dir_ = start.info.dump_dir;
  embeddings_ = std::make_unique<EmbeddingClient>(member_->ClientOptions(job_, &generation_), job_, route.plan,
                                                  member_->client(), route.ps_peers);
  dims_.clear();
  pooled_.clear();
  for (const TableConfig& t : job_.tables) {
    dims_.insert(dims_.end(), t.feature_names.size(), t.embedding_dim);
    pooled_.insert(pooled_.end(), t.feature_names.size(), t.pooling != PoolingType::kNone);
  }
  return Status::OK();
}

Status TrainerSession::FollowServerChange(const Status& why) {
  if (!member_->AwaitNewGeneration(generation_)) return why;
  TESSERA_ASSIGN_OR_RETURN(TrainerMember::GenerationStart start, member_->NextGeneration(generation_));
  if (start.info.start_step != step_) {
    const int64_t at = step_;
    TESSERA_RETURN_IF_ERROR(EnterAt(start));
    rollback_entered_ = true;
    return Status::Aborted("the job rolled back to step " + std::to_string(step_) + " (at step " +
                           std::to_string(at) + "): session.follow_rollback() says so and gives its state");
  }
  TESSERA_RETURN_IF_ERROR(Enter(start, /*restart=*/false));
  LOG(INFO) << "trainer " << member_->rank() << ": the servers changed at step " << step_ << "; generation "
            << generation_ << " goes on";
  return Status::OK();
}

Status TrainerSession::EnterAt(const TrainerMember::GenerationStart& start) {
  // Enter replaces the client: the old generation's calls in flight go
  // with it.
  TESSERA_RETURN_IF_ERROR(Enter(start, /*restart=*/true));
  start_step_ = step_ = start.info.start_step;
  push_owed_ = push_pending_ = prefetched_ = boundary_agreed_ = false;
  prefetched_kjt_.Clear();
  local_kjt_.Clear();
  out_rows_.clear();
  broken_ = Status::OK();
  window_loss_ = 0;
  window_examples_ = 0;
  window_start_ = Clock::now();
  LOG(WARNING) << "trainer " << member_->rank() << ": the job rolled back to step " << step_ << " (generation "
               << generation_ << ")";
  return Status::OK();
}

Status TrainerSession::FollowRollback(bool* followed) {
  *followed = false;
  if (finished_) return Status::FailedPrecondition("the session is finished");
  if (rollback_entered_) {
    rollback_entered_ = false;
    broken_ = Status::OK();
    *followed = true;
    return Status::OK();
  }
  // A lost member is noticed by the master within its peer timeout, by the
  // heartbeat here a beat later.
  if (!member_->AwaitNewGeneration(generation_)) return broken_;
  auto start = member_->NextGeneration(generation_);
  if (!start.ok()) return Keep(start.status());
  Status st = EnterAt(*start);
  if (!st.ok()) {
    broken_ = st;
    return st;
  }
  *followed = true;
  return Status::OK();
}

TrainerSession::~TrainerSession() {
  if (!finished_ && member_ != nullptr && embeddings_ != nullptr) {
    Status st = Finish("the Python trainer ended without finishing (the session was closed mid-job)");
    if (!st.ok()) LOG(WARNING) << st;
  }
}

Status TrainerSession::Keep(Status st) {
  switch (st.code()) {
    case StatusCode::kOk:
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
      return st;  // refused before it changed anything
    default:
      if (member_->stop_training()->load() && st.code() == StatusCode::kCancelled) {
        st = Status(st.code(), st.message() + "; the job rolls back: session.follow_rollback() follows it");
      }
      if (broken_.ok()) broken_ = st;
      return st;
  }
}

Status TrainerSession::CompleteStep() {
  if (!push_pending_) return Status::OK();
  push_pending_ = false;
  const auto waited = Clock::now();
  if (Status st = embeddings_->WaitPush(); !st.ok()) {
    // Whatever the code: a push a server refused cannot be sent again, so
    // its step never completes (a sync job's servers would hold every
    // later lookup), and every later call says why.
    st = Keep(st);
    if (broken_.ok()) broken_ = st;
    return st;
  }
  metrics_->RecordPushTime(std::chrono::duration<double>(Clock::now() - waited).count());
  metrics_->RecordStepDone(step_ - 1, generation_);
  ++steps_;
  ++*member_->steps_done();
  const bool log = steps_ % job_.training.log_every == 0;
  if (log && window_examples_ > 0) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - window_start_).count();
    TrainerProgress p;
    p.step = step_;
    p.loss = window_loss_ / static_cast<double>(window_examples_);
    p.examples = static_cast<double>(window_examples_);
    p.examples_per_s = seconds > 0 ? static_cast<double>(window_examples_) / seconds : 0.0;
    p.generation = generation_;
    p.total_steps = job_.training.steps;
    final_loss_ = p.loss;
    member_->SendProgress(p);
    window_loss_ = 0;
    window_examples_ = 0;
    window_start_ = now;
  }
  return Status::OK();
}

bool TrainerSession::AtBoundary() const {
  const int64_t every = job_.checkpoint.dir.empty() ? 0 : job_.checkpoint.every_steps;
  const bool periodic = every > 0 && step_ > start_step_ && step_ % every == 0;
  // On demand (and a change of the servers, which waits for a boundary the
  // same way): a lone trainer stops at once; several would have to agree on
  // the step first, which the C++ trainers do in their allreduce.
  const bool requested = member_->world() == 1 && member_->checkpoint_requested()->load();
  return periodic || requested || boundary_agreed_;
}

Status TrainerSession::MaybeCheckpoint() {
  if (!AtBoundary()) return Status::OK();
  auto state = [this]() { return SaveState(); };
  EmbeddingClient* reroute = job_.cluster.replicas >= 2 ? embeddings_.get() : nullptr;
  boundary_agreed_ = false;
  Status st = member_->Barrier(step_, &generation_, state, reroute, nullptr, job_.runtime.rpc_timeout_ms * 10);
  // The servers change at this boundary: the next generation starts here.
  if (st.code() == StatusCode::kCancelled) return FollowServerChange(st);
  return st;
}

StatusOr<std::string> TrainerSession::SaveState() {
  std::vector<ParamArray> arrays = local_->Export();
  std::string user;
  if (options_.save_state) {
    TESSERA_ASSIGN_OR_RETURN(user, options_.save_state());
  }
  arrays.push_back(ParamArray::Text("python.state", std::move(user)));
  return EncodeParams(arrays);
}

Status TrainerSession::OpenCollective() {
  if (collective_ != nullptr) return Status::OK();
  if (member_->world() == 1) {
    collective_ = NewLocalCollective();
    return Status::OK();
  }
  // As the C++ trainers' Gloo (trainer.cc): the ranks meet in the master's
  // store.
  TESSERA_ASSIGN_OR_RETURN(std::string host, AdvertisedHost(options_.host, "", options_.master));
  TESSERA_ASSIGN_OR_RETURN(collective_, NewGlooCollective(JobGlooOptions(job_, generation_, member_->rank(),
                                                                         member_->world(), std::move(host),
                                                                         member_->keys()),
                                                          store_.get()));
  return Status::OK();
}

Status TrainerSession::StepLocalTables(const FeatureGrads& grads) {
  if (local_->empty()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(local_->Backward(local_kjt_, grads));
  return SumInTurn(TakeSumTicket(), [this](Collective* c) { return local_->Step(c); });
}

Status TrainerSession::SumInTurn(int64_t ticket, const std::function<Status(Collective*)>& sum) {
  return RunInTurn(ticket, [&] {
    TESSERA_RETURN_IF_ERROR(sum_failure_);
    Status st = OpenCollective();
    if (st.ok()) st = sum(collective_.get());
    if (!st.ok()) sum_failure_ = st;
    return st;
  });
}

int64_t TrainerSession::TakeSumTicket() { return next_ticket_.fetch_add(1); }

Status TrainerSession::RunInTurn(int64_t ticket, const std::function<Status()>& fn) {
  const std::string which = "sum ticket " + std::to_string(ticket);
  if (ticket < 0 || ticket >= next_ticket_.load()) {
    return Status::InvalidArgument(which + " was never taken (session.take_sum_ticket)");
  }
  {
    std::unique_lock<std::mutex> lock(turn_mu_);
    // An earlier ticket taken and never used would hold every later sum: a
    // collective timeout bounds the wait, as it bounds a sum.
    const auto timeout = std::chrono::milliseconds(job_.runtime.collective_timeout_ms);
    if (!turn_cv_.wait_for(lock, timeout, [&] { return turn_ > ticket || (turn_ == ticket && !turn_taken_); })) {
      return Status::DeadlineExceeded(which + ": an earlier ticket's sum did not run within " +
                                      std::to_string(timeout.count()) +
                                      " ms (runtime.collective_timeout_ms); was a ticket taken and never used?");
    }
    if (turn_ > ticket) return Status::FailedPrecondition(which + " was used already");
    turn_taken_ = true;
  }
  Status st = fn();
  {
    std::lock_guard<std::mutex> lock(turn_mu_);
    turn_taken_ = false;
    ++turn_;
  }
  turn_cv_.notify_all();
  return st;
}

Status TrainerSession::AllReduceSum(std::span<float> data, int64_t ticket) {
  return SumInTurn(ticket, [&](Collective* c) { return c->AllReduceSum(data); });
}

// The program's keys live under "user/", apart from the session's own.
Status TrainerSession::StoreSet(const std::string& key, std::string value) {
  return store_->Set("user/" + key, std::move(value));
}

StatusOr<std::string> TrainerSession::StoreGet(const std::string& key, std::chrono::milliseconds timeout) {
  return store_->Get("user/" + key, timeout);
}

StatusOr<int64_t> TrainerSession::StoreAdd(const std::string& key, int64_t delta) {
  return store_->Add("user/" + key, delta);
}

Status TrainerSession::Lookup(const KeyedJaggedTensor& kjt, bool inference, FeatureOutputs* out) {
  if (finished_) return Status::FailedPrecondition("the session is finished");
  if (!broken_.ok()) return broken_;
  if (member_->stop_training()->load()) {
    Status why = member_->fatal();
    if (why.ok()) {
      why = Status::Aborted("the job moved to a new generation (a lost member); it rolls back: "
                            "session.follow_rollback() follows it");
    }
    return Keep(why);
  }
  // Data-parallel ids are checked here: the servers check only theirs.
  TESSERA_RETURN_IF_ERROR(local_->CheckIds(kjt));
  if (!inference && push_owed_) {
    return Status::FailedPrecondition("step " + std::to_string(step_ - 1) +
                                      "'s gradients were never sent back: call backward() on a loss of its output "
                                      "before the next training lookup");
  }
  Clock::time_point began;  // the lookup's, and the step's, start
  if (prefetched_) {
    // The client answers lookups in the order they were sent: the
    // prefetched one comes first.
    if (inference) {
      return Status::FailedPrecondition("a batch is prefetched: look it up (the next training step) before an "
                                        "evaluation lookup");
    }
    if (kjt.keys != prefetched_kjt_.keys || kjt.batch_size != prefetched_kjt_.batch_size ||
        kjt.lengths != prefetched_kjt_.lengths || kjt.values != prefetched_kjt_.values ||
        kjt.weights != prefetched_kjt_.weights) {
      return Status::FailedPrecondition("this batch is not the one prefetched for step " + std::to_string(step_) +
                                        ": look up the prefetched batch first");
    }
    prefetched_ = false;
    prefetched_kjt_.Clear();
    TESSERA_RETURN_IF_ERROR(Keep(CompleteStep()));
    began = Clock::now();
    TESSERA_RETURN_IF_ERROR(Keep(embeddings_->FinishLookup(out)));
  } else {
    TESSERA_RETURN_IF_ERROR(Keep(CompleteStep()));
    if (inference) {
      // Between a training forward and its backward, an evaluation reads the
      // rows that forward read: under its step, which the servers serve now.
      // Under the next one, a sync job's servers would hold it until this
      // trainer's push, which waits for it: a deadlock until the deadline.
      const int64_t step = push_owed_ ? step_ - 1 : step_;
      TESSERA_RETURN_IF_ERROR(Keep(embeddings_->Lookup(static_cast<uint64_t>(step), kjt, true, out)));
      return local_->Lookup(kjt, out);
    }
    TESSERA_RETURN_IF_ERROR(Keep(MaybeCheckpoint()));
    began = Clock::now();
    TESSERA_RETURN_IF_ERROR(Keep(embeddings_->Lookup(static_cast<uint64_t>(step_), kjt, false, out)));
  }
  // Rows as the last step's update left them, as the C++ trainer's.
  TESSERA_RETURN_IF_ERROR(local_->Lookup(kjt, out));
  if (!local_->empty()) local_kjt_ = kjt;
  metrics_->RecordLookup(began, kjt.batch_size, embeddings_->last_lookup_bytes(), embeddings_->last_reply_bytes());
  out_rows_.resize(out->size());
  for (size_t f = 0; f < out->size(); ++f) out_rows_[f] = static_cast<int64_t>((*out)[f].size()) / dims_[f];
  if (step_ == start_step_ + warmup_steps_) {
    timed_start_ = Clock::now();
    timed_examples_ = 0;
  }
  examples_ += kjt.batch_size;
  timed_examples_ += kjt.batch_size;
  ++step_;
  push_owed_ = true;
  return Status::OK();
}

Status TrainerSession::Prefetch(const KeyedJaggedTensor& kjt) {
  if (finished_) return Status::FailedPrecondition("the session is finished");
  if (!broken_.ok()) return broken_;
  if (prefetched_) return Status::FailedPrecondition("a batch is already prefetched: look it up first");
  if (step_ == start_step_ && !push_owed_) {
    return Status::FailedPrecondition("prefetch the next batch after a training lookup (forward), not before");
  }
  // A boundary (checkpoint, servers changing) stops before the lookup: the
  // next step is looked up then, not now.
  if (AtBoundary()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(kjt.Validate());
  TESSERA_RETURN_IF_ERROR(local_->CheckIds(kjt));
  TESSERA_RETURN_IF_ERROR(Keep(embeddings_->StartLookup(static_cast<uint64_t>(step_), kjt, false)));
  prefetched_ = true;
  prefetched_kjt_ = kjt;
  return Status::OK();
}

Status TrainerSession::Push(const FeatureGrads& grads) {
  if (!broken_.ok()) return broken_;
  if (!push_owed_) {
    return Status::FailedPrecondition("no training lookup waits for its gradients (each step's are sent once)");
  }
  if (grads.size() != dims_.size()) {
    return Status::InvalidArgument("gradients for " + std::to_string(grads.size()) + " features; the job has " +
                                   std::to_string(dims_.size()));
  }
  for (size_t f = 0; f < grads.size(); ++f) {
    const size_t want = static_cast<size_t>(out_rows_[f]) * dims_[f];
    if (grads[f].size() != want) {
      return Status::InvalidArgument("the gradient of feature '" + features()[f] + "' has " +
                                     std::to_string(grads[f].size()) + " values; its output had " +
                                     std::to_string(want) + " (" + std::to_string(out_rows_[f]) + " x " +
                                     std::to_string(dims_[f]) + ")");
    }
  }
  // The servers refuse a push with a NaN or an infinity, and once sent a
  // step's gradients cannot be sent again: refused here, the step is still
  // owed, and the error comes at the backward that made them, not a step later.
  for (size_t f = 0; f < grads.size(); ++f) {
    const auto bad = std::find_if(grads[f].begin(), grads[f].end(), [](float g) { return !std::isfinite(g); });
    if (bad != grads[f].end()) {
      const auto at = bad - grads[f].begin();
      return Status::InvalidArgument("the gradient of feature '" + features()[f] + "' is " + std::to_string(*bad) +
                                     " at [" + std::to_string(at / dims_[f]) + ", " +
                                     std::to_string(at % dims_[f]) + "]: nothing sent; the step's gradients are "
                                     "still owed");
    }
  }
  const auto sending = Clock::now();
  TESSERA_RETURN_IF_ERROR(Keep(embeddings_->StartPush(grads)));
  metrics_->RecordPushTime(std::chrono::duration<double>(Clock::now() - sending).count());
  push_owed_ = false;
  push_pending_ = true;
  return Keep(StepLocalTables(grads));
}

void TrainerSession::RecordLoss(double loss_sum, int64_t examples) {
  loss_recorded_ = true;
  window_loss_ += loss_sum;
  window_examples_ += examples;
  metrics_->RecordLoss(loss_sum, examples);
}

Status TrainerSession::Finish(const std::string& error, const nlohmann::json& eval) {
  if (finished_) return Status::FailedPrecondition("the session is already finished");
  finished_ = true;
  Status st = error.empty() ? Status::OK() : Status::Aborted(error);
  if (st.ok()) st = broken_;
  if (st.ok() && push_owed_) {
    st = Status::FailedPrecondition("step " + std::to_string(step_ - 1) + "'s gradients were never sent back");
  }
  if (st.ok()) st = CompleteStep();
  if (st.ok() && member_->rank() == 0 && !dump_dir_.empty() && !local_->empty()) {
    // Beside the servers' shards and the program's dense model, as the C++
    // trainer 0 writes them.
    std::error_code ec;
    std::filesystem::create_directories(dump_dir_, ec);
    st = ec ? Status::Unavailable("cannot create " + dump_dir_ + ": " + ec.message())
            : WriteParamFile(dump_dir_ + "/dp.params", local_->Export());
  }
  // The last window, however short, as the C++ trainer's final loss.
  if (window_examples_ > 0) final_loss_ = window_loss_ / static_cast<double>(window_examples_);
  const auto end = Clock::now();
  const double wall_s = std::chrono::duration<double>(end - run_start_).count();
  const double timed_s = std::chrono::duration<double>(end - timed_start_).count();
  nlohmann::json report = {{"steps", steps_},
                           {"examples", examples_},
                           {"examples_per_s", timed_s > 0 ? static_cast<double>(timed_examples_) / timed_s : 0.0},
                           {"wall_s", wall_s}};
  if (loss_recorded_) report["final_loss"] = final_loss_;
  if (!eval.is_null()) report["eval"] = eval;
  return member_->ReportDone(std::move(report), st);
}

}  // namespace tessera
