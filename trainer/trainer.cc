#include "trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <glog/logging.h>

#include "common/control_messages.h"
#include "common/master_registration.h"
#include "common/messages.h"
#include "common/param_file.h"
#include "common/sharding_plan.h"
#include "kernels/dense_ops.h"
#include "trainer/collective.h"
#include "trainer/data_factory.h"
#include "trainer/dense_backend.h"
#include "trainer/dense_optimizer.h"
#include "trainer/dlrm_model.h"
#include "trainer/embedding_client.h"
#include "trainer/master_store.h"
#include "trainer/training_loop.h"

#if defined(TESSERA_HAVE_NCCL)
#include "kernels/cuda/device_cuda.h"
#include "trainer/collective_host_staged.h"
#include "trainer/collective_nccl.h"
#endif

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

std::string Trainer::GpuPathMissing() {
#if defined(TESSERA_HAVE_NCCL)
  return "";
#else
  return "this trainer was built without NCCL (not found at build time), which the GPU path needs for the dense "
         "allreduce; rebuild with NCCL installed";
#endif
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Start(const TrainerOptions& options) {
  if (options.master.empty()) return Status::InvalidArgument("the master's address is required (--master)");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return Status::InvalidArgument("--rank must be in [0, --world)");
  }
  if (options.device >= 0 && !GpuPathMissing().empty()) {
    return Status::Unavailable("--device cuda:" + std::to_string(options.device) + ": " + GpuPathMissing());
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->options_ = options;
  TESSERA_ASSIGN_OR_RETURN(t->client_, RpcClient::Create(options.keys));
  TESSERA_ASSIGN_OR_RETURN(t->master_peer_, t->client_->Connect(options.master, Role::kMaster));
  kernels::SetBlasThreads(options.blas_threads);
  return t;
}

Trainer::~Trainer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_heartbeat_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status Trainer::Register() {
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

TrainerId Trainer::Id() const { return TrainerId{options_.rank, incarnation_.load()}; }

StatusOr<Trainer::GenerationStart> Trainer::WaitStart(int64_t after) {
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

void Trainer::ForgetServersNotIn(const std::vector<std::string>& endpoints) {
  for (auto it = server_peers_.begin(); it != server_peers_.end();) {
    if (std::find(endpoints.begin(), endpoints.end(), it->first) != endpoints.end()) {
      ++it;
      continue;
    }
    client_->Disconnect(it->second);
    it = server_peers_.erase(it);
  }
}

StatusOr<int> Trainer::ServerPeer(const std::string& endpoint) {
  auto it = server_peers_.find(endpoint);
  if (it != server_peers_.end()) return it->second;
  TESSERA_ASSIGN_OR_RETURN(int peer, client_->Connect(endpoint, Role::kPs));
  server_peers_[endpoint] = peer;
  return peer;
}

void Trainer::CancelServerCalls(const Status& why) {
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers = generation_peers_;
  }
  for (int peer : peers) client_->CancelCalls(peer, why);
}

bool Trainer::AwaitNewGeneration(int64_t generation) {
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

bool Trainer::AwaitMasterChange(int64_t changes) {
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

void Trainer::SendProgress(const TrainerProgress& progress) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_progress_ = progress;
  }
  cv_.notify_all();
}

void Trainer::HeartbeatLoop() {
  auto last_contact = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, milliseconds(heartbeat_ms_), [this] { return stop_heartbeat_ || pending_progress_.has_value(); });
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
                                  std::to_string(master_reconnect_ms_) + " ms (runtime.master_reconnect_ms)");
    } else if (now - last_contact > milliseconds(peer_timeout_ms_) && master_settled_.exchange(false)) {
      LOG(WARNING) << "trainer " << options_.rank << ": no answer from the master " << options_.master
                   << "; retrying for up to " << master_reconnect_ms_ << " ms (a master restarted with --recover "
                   << "takes the job over)";
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

StatusOr<EmbeddingRoute> Trainer::FollowPromotion(int64_t* generation, const Status& why) {
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
    // A rollback: this generation is over (Run starts the next one).
    return Status::Cancelled("the job's servers changed (generation " + std::to_string(start.info.generation) +
                             "): it rolls back");
  }
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::FromJson(start.info.plan));
  ForgetServersNotIn(start.info.ps_endpoints);
  std::vector<int> peers;
  for (const std::string& e : start.info.ps_endpoints) {
    TESSERA_ASSIGN_OR_RETURN(int peer, ServerPeer(e));
    peers.push_back(peer);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_peers_ = peers;
  }
  *generation = start.info.generation;
  running_generation_ = *generation;
  LOG(WARNING) << "trainer " << options_.rank << ": a lost server's backups took over; generation " << *generation
               << ", the step goes on";
  promoted_route_ = EmbeddingRoute{std::move(plan), std::move(peers)};
  return *promoted_route_;
}

Status Trainer::Train(const GenerationStart& start, json* report) {
  TESSERA_ASSIGN_OR_RETURN(JobConfig job, ParseJobConfigJson(start.info.job, ""));
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::FromJson(start.info.plan));
  ForgetServersNotIn(start.info.ps_endpoints);
  std::vector<int> ps_peers;
  for (const std::string& e : start.info.ps_endpoints) {
    TESSERA_ASSIGN_OR_RETURN(int peer, ServerPeer(e));
    ps_peers.push_back(peer);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_peers_ = ps_peers;
  }
  // Moves on when a lost server's backups take over (a promotion): the step
  // in flight goes on under the new plan.
  int64_t generation = running_generation_.load();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, OpenTrainingData(job));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> eval_data, OpenEvalData(job));

  EmbeddingClientOptions eo;
  eo.trainer = static_cast<uint32_t>(options_.rank);
  eo.timeout = milliseconds(job.runtime.rpc_timeout_ms);
  eo.row_replies = job.training.row_replies;
  const bool replicated = job.cluster.replicas >= 2;
  if (replicated) {
    eo.reroute = [this, &generation](const Status& why) { return FollowPromotion(&generation, why); };
    eo.plan_replaced = [this, &generation] { return master_generation_.load() > generation; };
  }
  EmbeddingClient embeddings(eo, job, plan, client_.get(), ps_peers);
  TESSERA_ASSIGN_OR_RETURN(DataParallelTables local_tables, DataParallelTables::Create(job, plan));

  std::vector<int> dims;
  for (const TableConfig& t : job.tables) dims.insert(dims.end(), t.feature_names.size(), t.embedding_dim);
  // The backend first: on a GPU it makes the device current for what follows.
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DenseBackend> backend, NewDenseBackend(options_.device));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DlrmModel> model_ptr,
                           DlrmModel::Create(job.model, dims, job.training.seed, backend.get()));
  DlrmModel& model = *model_ptr;
  TESSERA_ASSIGN_OR_RETURN(DenseOptimizer optimizer, DenseOptimizer::Create(job.training.dense_optimizer,
                                                                            model.num_params(), backend.get()));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Collective> collective, OpenCollective(job));
  LOG(INFO) << "trainer " << options_.rank << ": dense model on " << backend->name();

  // Trainer state, what a checkpoint keeps of the trainers: the dense model
  // and its optimizer, and the data-parallel tables (trainer 0 sends it).
  auto save_state = [&]() -> StatusOr<std::string> {
    std::vector<ParamArray> arrays = local_tables.Export();
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> params, model.CopyParamsToHost());
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> opt_state, optimizer.CopyStateToHost());
    arrays.push_back(ParamArray::Floats("dense.params", 1, model.num_params(), std::move(params)));
    const int64_t state_size = static_cast<int64_t>(opt_state.size());
    arrays.push_back(ParamArray::Floats("dense.optimizer_state", 1, state_size, std::move(opt_state)));
    arrays.push_back(ParamArray::Ints("dense.optimizer_steps", 1, 1, {optimizer.steps()}));
    return EncodeParams(arrays);
  };
  const int64_t start_step = start.info.start_step;
  if (!start.state_bytes.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<ParamArray> state,
                             DecodeParams(start.state_bytes, "checkpoint trainer state"));
    const ParamArray* params = FindParam(state, "dense.params");
    const ParamArray* opt = FindParam(state, "dense.optimizer_state");
    const ParamArray* steps = FindParam(state, "dense.optimizer_steps");
    if (params == nullptr || opt == nullptr || steps == nullptr || steps->i64.empty() ||
        params->f32.size() != static_cast<size_t>(model.num_params())) {
      return Status::DataLoss("the checkpoint's trainer state does not fit this model");
    }
    TESSERA_RETURN_IF_ERROR(model.LoadParams(params->f32));
    TESSERA_RETURN_IF_ERROR(optimizer.Restore(opt->f32, steps->i64[0]));
    TESSERA_RETURN_IF_ERROR(local_tables.Import(state));
    LOG(INFO) << "trainer " << options_.rank << ": resumed at step " << start_step;
  }

  TrainingLoopOptions lo;
  lo.rank = options_.rank;
  lo.world = options_.world;
  lo.metrics_file = options_.metrics_file;
  // A later generation goes on with the same file: replayed steps appear again.
  lo.append_metrics = generation > 1;
  lo.generation = generation;
  lo.stop = &stop_training_;
  lo.steps_done = &steps_done_;
  if (options_.test_stall_at_step >= 0) {
    lo.before_step = [this](int64_t step) {
      if (step != options_.test_stall_at_step) return;
      LOG(ERROR) << "trainer " << options_.rank << ": --test_stall_at_step " << step << ": stuck here";
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    };
  }
  lo.start_step = start_step;
  lo.checkpoint_every = job.checkpoint.dir.empty() ? 0 : job.checkpoint.every_steps;
  // Also without checkpoints: the servers change at a boundary the master asks for.
  lo.checkpoint_requested = &checkpoint_requested_;
  lo.barrier = [&](int64_t step) -> Status {
    StatusOr<Message> reply = Status::Internal("no barrier attempt");
    for (int attempt = 0;; ++attempt) {
      BarrierRequest req;
      req.trainer = Id();
      req.step = step;
      req.generation = generation;
      Message m = EncodeJson(Opcode::kCheckpointBarrier, req.ToJson());
      if (options_.rank == 0) {
        TESSERA_ASSIGN_OR_RETURN(std::string bytes, save_state());
        m.AddString(bytes);
      }
      // Waits while the others arrive and every server snapshots.
      RpcFuture arrived = client_->Call(master_peer_, std::move(m), milliseconds(job.runtime.rpc_timeout_ms * 10));
      if (options_.test_crash_in_checkpoint > 0 && ++barriers_arrived_ == options_.test_crash_in_checkpoint &&
          options_.crash_hook) {
        std::this_thread::sleep_for(milliseconds(200));  // the request is at the master
        LOG(ERROR) << "trainer " << options_.rank << ": --test_crash_in_checkpoint: dying at the barrier of step "
                   << step;
        options_.crash_hook();
      }
      reply = arrived.Wait();
      if (reply.ok()) break;
      // A server lost at the barrier whose backups took over: arrive again,
      // in the new generation.
      if (!replicated || attempt >= 3 || !embeddings.Reroute(reply.status()).ok()) {
        return reply.status().WithContext("checkpoint barrier at step " + std::to_string(step));
      }
    }
    TESSERA_ASSIGN_OR_RETURN(json j, DecodeJson(*reply));
    TESSERA_ASSIGN_OR_RETURN(BarrierReply answer, BarrierReply::Parse(j));
    checkpoint_served_id_ = std::max<int64_t>(checkpoint_served_id_, answer.served);
    checkpoint_requested_ = checkpoint_requested_id_.load() > checkpoint_served_id_.load();
    if (answer.action == "restart") {
      // The servers changed at this boundary; the next generation starts here.
      const int64_t next = std::max(answer.generation, generation + 1);
      int64_t seen = master_generation_.load();
      while (seen < next && !master_generation_.compare_exchange_weak(seen, next)) {
      }
      return Status::Cancelled("the job's servers change at step " + std::to_string(step));
    }
    return Status::OK();
  };
  int64_t total_steps = 0;  // known once the loop is made
  lo.on_progress = [this, &generation, &total_steps](const json& p) {
    LOG(INFO) << "trainer " << options_.rank << " step " << p["step"] << " loss " << p["loss"] << " examples/s "
              << p["examples_per_s"];
    TrainerProgress progress;
    progress.step = p["step"].get<int64_t>();
    progress.loss = p["loss"].get<double>();
    progress.examples = p["examples"].get<double>();
    progress.examples_per_s = p["examples_per_s"].get<double>();
    progress.generation = generation;
    progress.epoch = p.value("epoch", int64_t{-1});
    progress.total_steps = total_steps;
    SendProgress(progress);
  };
  TrainingLoop loop(job, lo, data.get(), &embeddings, &local_tables, collective.get(), &model, &optimizer);
  total_steps = loop.TotalSteps();
  LOG(INFO) << "trainer " << options_.rank << ": training " << loop.TotalSteps() << " steps of batch "
            << job.training.batch_size << " on " << data->num_examples() << " examples";
  TESSERA_ASSIGN_OR_RETURN(TrainingResult result, loop.Run());
  *report = {{"steps", result.steps},
             {"examples", result.examples},
             {"final_loss", result.final_loss},
             {"examples_per_s", result.examples_per_s},
             {"wall_s", result.wall_s}};

  if (options_.rank == 0 && eval_data) {
    TESSERA_ASSIGN_OR_RETURN(json eval, loop.Evaluate(eval_data.get(), static_cast<uint64_t>(result.steps)));
    LOG(INFO) << "trainer 0: eval " << eval.dump();
    (*report)["eval"] = eval;
  }
  const std::string& dump_dir = start.info.dump_dir;
  if (options_.rank == 0 && !dump_dir.empty()) {
    std::vector<ParamArray> arrays;
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> params, model.CopyParamsToHost());
    for (const auto& info : model.ParamInfos()) {
      const float* p = params.data() + info.offset;
      arrays.push_back(ParamArray::Floats(info.name, info.rows, info.cols,
                                          std::vector<float>(p, p + info.rows * info.cols)));
    }
    std::error_code ec;
    std::filesystem::create_directories(dump_dir, ec);
    if (ec) return Status::Unavailable("cannot create " + dump_dir + ": " + ec.message());
    TESSERA_RETURN_IF_ERROR(WriteParamFile(dump_dir + "/dense.params", arrays));
    if (!local_tables.empty()) TESSERA_RETURN_IF_ERROR(WriteParamFile(dump_dir + "/dp.params", local_tables.Export()));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<Collective>> Trainer::OpenCollective(const JobConfig& job) {
  if (options_.world == 1) return NewLocalCollective();
  store_ = std::make_unique<MasterStore>(client_.get(), master_peer_, milliseconds(job.runtime.collective_timeout_ms));
#if defined(TESSERA_HAVE_NCCL)
  // Every trainer makes the same choice (they all read the same answers).
  TESSERA_ASSIGN_OR_RETURN(const std::string why_not_nccl, WhyNotNccl(job));
  if (why_not_nccl.empty()) {
    NcclCollectiveOptions no;
    no.rank = options_.rank;
    no.world = options_.world;
    no.device = options_.device;
    no.prefix = "nccl/" + job.name + "/g" + std::to_string(running_generation_.load());
    no.timeout = milliseconds(job.runtime.collective_timeout_ms);
    return NewNcclCollective(no, store_.get());
  }
  if (options_.device >= 0) {
    LOG(WARNING) << "trainer " << options_.rank << ": " << why_not_nccl
                 << "; the dense allreduce goes through host memory (Gloo)";
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Collective> gloo, OpenGlooCollective(job));
    return StageDeviceSumsThroughHost(std::move(gloo));
  }
#endif
  return OpenGlooCollective(job);
}

StatusOr<std::unique_ptr<Collective>> Trainer::OpenGlooCollective(const JobConfig& job) {
  GlooCollectiveOptions go;
  go.rank = options_.rank;
  go.world = options_.world;
  go.host = options_.host;
  // Each generation meets under its own keys: a rebuilt collective never
  // reads the addresses of the one it replaces.
  go.prefix = "gloo/" + job.name + "/g" + std::to_string(running_generation_.load());
  go.timeout = milliseconds(job.runtime.collective_timeout_ms);
  return NewGlooCollective(go, store_.get());
}

#if defined(TESSERA_HAVE_NCCL)
StatusOr<std::string> Trainer::WhyNotNccl(const JobConfig& job) {
  // Each trainer says where it computes ("cpu", or its host and the GPU's PCI
  // bus id) in the master's store, then reads what the others said. NCCL
  // needs every trainer on a GPU of its own.
  std::string mine = "cpu";
  if (options_.device >= 0) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) return Status::Unavailable("gethostname failed");
    TESSERA_ASSIGN_OR_RETURN(const std::string bus, kernels::DevicePciBusId(options_.device));
    mine = std::string(host) + "/" + bus;
  }
  const std::string prefix = "devices/" + job.name + "/g" + std::to_string(running_generation_.load()) + "/";
  const milliseconds timeout(job.runtime.collective_timeout_ms);
  TESSERA_RETURN_IF_ERROR(store_->Set(prefix + std::to_string(options_.rank), mine));
  std::set<std::string> seen;
  std::string why;
  for (int r = 0; r < options_.world; ++r) {
    TESSERA_ASSIGN_OR_RETURN(const std::string where, store_->Get(prefix + std::to_string(r), timeout));
    if (where == "cpu") {
      if (why.empty()) why = "trainer " + std::to_string(r) + " runs on the CPU";
    } else if (!seen.insert(where).second && why.empty()) {
      why = "two trainers share the GPU " + where + ", which NCCL cannot put in one communicator";
    }
  }
  return why;
}
#else
StatusOr<std::string> Trainer::WhyNotNccl(const JobConfig&) { return std::string("built without NCCL"); }
#endif

Status Trainer::Run() {
  TESSERA_RETURN_IF_ERROR(Register());
  heartbeat_ = std::thread(&Trainer::HeartbeatLoop, this);
  json report;
  Status st;
  int64_t generation = 0;
  for (;;) {
    const int64_t changes = master_changes_.load();
    auto start = WaitStart(generation);
    if (!start.ok()) {
      // Asked of a master that died, or of its successor before this trainer
      // registered with it: ask again once registered.
      if (AwaitMasterChange(changes)) continue;
      st = start.status();
      break;
    }
    generation = start->info.generation;
    running_generation_ = generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_.ok()) {
        st = fatal_;
        break;
      }
      stop_training_ = false;
    }
    report = json::object();
    st = Train(*start, &report);
    if (st.ok() || !AwaitNewGeneration(generation)) break;
    LOG(WARNING) << "trainer " << options_.rank << ": generation " << generation << " ended (" << st
                 << "); joining the next";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_.ok()) st = fatal_;
  }
  report["rank"] = options_.rank;
  report["incarnation"] = incarnation_.load();  // REPORT_DONE: the report plus the TrainerId
  report["ok"] = st.ok();
  if (!st.ok()) report["error"] = st.ToString();
  auto reply = client_->CallSync(master_peer_, EncodeJson(Opcode::kReportDone, report), milliseconds(10000));
  if (!reply.ok()) LOG(WARNING) << "could not report to the master: " << reply.status();
  return st;
}

}  // namespace tessera
