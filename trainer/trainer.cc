#include "trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

void Trainer::WriteMetrics(PrometheusText* out) const { metrics_.Write(out, member_->rank()); }

std::string Trainer::GpuPathMissing() {
#if defined(TESSERA_HAVE_NCCL)
  return "";
#else
  return "this trainer was built without NCCL (not found at build time), which the GPU path needs for the dense "
         "allreduce; rebuild with NCCL installed";
#endif
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Start(const TrainerOptions& options) {
  if (options.device >= 0 && !GpuPathMissing().empty()) {
    return Status::Unavailable("--device cuda:" + std::to_string(options.device) + ": " + GpuPathMissing());
  }
  if (options.blas_threads < 1) {
    return Status::InvalidArgument("--blas_threads " + std::to_string(options.blas_threads) + ": at least 1");
  }
  if (!options.metrics_file.empty()) {
    // Checked before the job counts on this trainer, not at its first step
    // (the file is written from the start of training).
    std::ofstream probe(options.metrics_file, std::ios::app);
    if (!probe) return ErrnoStatus("cannot write metrics file " + options.metrics_file);
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->options_ = options;
  TESSERA_ASSIGN_OR_RETURN(t->member_, TrainerMember::Connect(options.member));
  kernels::SetBlasThreads(options.blas_threads);
  return t;
}

Trainer::~Trainer() = default;

Status Trainer::Train(const GenerationStart& start, json* report) {
  TESSERA_ASSIGN_OR_RETURN(JobConfig job, ParseJobConfigJson(start.info.job, ""));
  if (!job.has_model) {
    return Status::FailedPrecondition(
        "the job has no model (no \"model\" in its config): it is for trainers that bring their own, such as "
        "PyTorch trainers (docs/python.md), not tessera_trainer");
  }
  TESSERA_ASSIGN_OR_RETURN(EmbeddingRoute route, member_->EnterGeneration(start.info));
  // Moves on when a lost server's backups take over (a promotion): the step
  // in flight goes on under the new plan.
  int64_t generation = member_->running_generation();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, OpenTrainingData(job));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> eval_data, OpenEvalData(job));

  EmbeddingClient embeddings(member_->ClientOptions(job, &generation), job, route.plan, member_->client(),
                             route.ps_peers);
  TESSERA_ASSIGN_OR_RETURN(DataParallelTables local_tables, DataParallelTables::Create(job, route.plan));

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
  LOG(INFO) << "trainer " << member_->rank() << ": dense model on " << backend->name();

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
    LOG(INFO) << "trainer " << member_->rank() << ": resumed at step " << start_step;
  }

  TrainingLoopOptions lo;
  lo.rank = member_->rank();
  lo.world = member_->world();
  lo.metrics_file = options_.metrics_file;
  // A later generation goes on with the same file: replayed steps appear again.
  lo.append_metrics = generation > 1;
  lo.generation = generation;
  lo.stop = member_->stop_training();
  lo.steps_done = member_->steps_done();
  lo.step_metrics = &metrics_;
  lo.allreduce_bucket_bytes = job.training.allreduce_bucket_bytes;
  if (member_->rank() == 0) {
    lo.eval_data = eval_data.get();
    lo.eval_every = job.training.eval_every;
  }
  if (options_.test_stall_at_step >= 0) {
    lo.before_step = [this](int64_t step) {
      if (step != options_.test_stall_at_step) return;
      LOG(ERROR) << "trainer " << member_->rank() << ": --test_stall_at_step " << step << ": stuck here";
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    };
  }
  lo.start_step = start_step;
  lo.checkpoint_every = job.checkpoint.dir.empty() ? 0 : job.checkpoint.every_steps;
  // Also without checkpoints: the servers change at a boundary the master asks for.
  lo.checkpoint_requested = member_->checkpoint_requested();
  const bool replicated = job.cluster.replicas >= 2;
  lo.barrier = [&](int64_t step) -> Status {
    std::function<void()> arrived;
    if (options_.test_crash_in_checkpoint > 0 && options_.crash_hook) {
      arrived = [this, step] {
        if (++barriers_arrived_ != options_.test_crash_in_checkpoint) return;
        std::this_thread::sleep_for(milliseconds(200));  // the request is at the master
        LOG(ERROR) << "trainer " << member_->rank() << ": --test_crash_in_checkpoint: dying at the barrier of step "
                   << step;
        options_.crash_hook();
      };
    }
    return member_->Barrier(step, &generation, save_state, replicated ? &embeddings : nullptr, arrived,
                            job.runtime.rpc_timeout_ms * 10);
  };
  int64_t total_steps = 0;  // known once the loop is made
  lo.on_progress = [this, &generation, &total_steps](const json& p) {
    LOG(INFO) << "trainer " << member_->rank() << " step " << p["step"] << " loss " << p["loss"] << " examples/s "
              << p["examples_per_s"];
    TrainerProgress progress;
    progress.step = p["step"].get<int64_t>();
    progress.loss = p["loss"].get<double>();
    progress.examples = p["examples"].get<double>();
    progress.examples_per_s = p["examples_per_s"].get<double>();
    progress.generation = generation;
    progress.epoch = p.value("epoch", int64_t{-1});
    progress.total_steps = total_steps;
    member_->SendProgress(progress);
  };
  TrainingLoop loop(job, lo, data.get(), &embeddings, &local_tables, collective.get(), &model, &optimizer);
  total_steps = loop.TotalSteps();
  LOG(INFO) << "trainer " << member_->rank() << ": training " << loop.TotalSteps() << " steps of batch "
            << job.training.batch_size << " on " << data->num_examples() << " examples";
  TESSERA_ASSIGN_OR_RETURN(TrainingResult result, loop.Run());
  *report = {{"steps", result.steps},
             {"examples", result.examples},
             {"final_loss", result.final_loss},
             {"examples_per_s", result.examples_per_s},
             {"wall_s", result.wall_s}};

  if (member_->rank() == 0 && eval_data) {
    TESSERA_ASSIGN_OR_RETURN(json eval, loop.Evaluate(eval_data.get(), static_cast<uint64_t>(result.steps)));
    LOG(INFO) << "trainer 0: eval " << eval.dump();
    metrics_.RecordEvaluation(result.steps, eval);
    (*report)["eval"] = eval;
  }
  const std::string& dump_dir = start.info.dump_dir;
  if (member_->rank() == 0 && !dump_dir.empty()) {
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
  if (member_->world() == 1) return NewLocalCollective();
  store_ = std::make_unique<MasterStore>(member_->client(), member_->master_peer(),
                                         milliseconds(job.runtime.collective_timeout_ms));
#if defined(TESSERA_HAVE_NCCL)
  // Every trainer makes the same choice (they all read the same answers).
  TESSERA_ASSIGN_OR_RETURN(std::string why_not_nccl, WhyNotNccl(job));
  const bool keyed = member_->keys() != nullptr;
  if (why_not_nccl.empty() && keyed && !job.runtime.unsealed_nccl) {
    why_not_nccl =
        "the job has keys and NCCL's connections are neither authenticated nor encrypted (runtime.unsealed_nccl: "
        "true takes NCCL anyway)";
  }
  if (why_not_nccl.empty()) {
    if (keyed) {
      LOG(WARNING) << "trainer " << member_->rank()
                   << ": the dense allreduce runs over NCCL, unsealed (runtime.unsealed_nccl): whoever reaches "
                      "the trainers' NCCL connections can read and change the dense gradients";
    }
    NcclCollectiveOptions no;
    no.rank = member_->rank();
    no.world = member_->world();
    no.device = options_.device;
    no.prefix = "nccl/" + job.name + "/g" + std::to_string(member_->running_generation());
    no.timeout = milliseconds(job.runtime.collective_timeout_ms);
    return NewNcclCollective(no, store_.get());
  }
  if (options_.device >= 0) {
    LOG(WARNING) << "trainer " << member_->rank() << ": " << why_not_nccl
                 << "; the dense allreduce goes through host memory (Gloo" << (keyed ? ", sealed)" : ")");
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Collective> gloo, OpenGlooCollective(job));
    return StageDeviceSumsThroughHost(std::move(gloo));
  }
#endif
  return OpenGlooCollective(job);
}

StatusOr<std::unique_ptr<Collective>> Trainer::OpenGlooCollective(const JobConfig& job) {
  return NewGlooCollective(
      JobGlooOptions(job, member_->running_generation(), member_->rank(), member_->world(), options_.host,
                     member_->keys()),
      store_.get());
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
  const std::string prefix = "devices/" + job.name + "/g" + std::to_string(member_->running_generation()) + "/";
  const milliseconds timeout(job.runtime.collective_timeout_ms);
  TESSERA_RETURN_IF_ERROR(store_->Set(prefix + std::to_string(member_->rank()), mine));
  std::set<std::string> seen;
  std::string why;
  for (int r = 0; r < member_->world(); ++r) {
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
  TESSERA_RETURN_IF_ERROR(member_->Join());
  json report;
  Status st;
  int64_t generation = 0;
  for (;;) {
    auto start = member_->NextGeneration(generation);
    if (!start.ok()) {
      st = start.status();
      break;
    }
    generation = start->info.generation;
    report = json::object();
    st = Train(*start, &report);
    if (st.ok() || !member_->AwaitNewGeneration(generation)) break;
    LOG(WARNING) << "trainer " << member_->rank() << ": generation " << generation << " ended (" << st
                 << "); joining the next";
  }
  return member_->ReportDone(std::move(report), st);
}

}  // namespace tessera
