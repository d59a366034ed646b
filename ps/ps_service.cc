#include "ps/ps_service.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/json_fields.h"
#include "common/param_file.h"
#include "common/thread_cpu_time.h"
#include "kernels/dedup.h"
#include "kernels/row_sum.h"
#include "ps/page_memory.h"

namespace tessera {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

kernels::IdDeduper* ThreadDeduper() {
  thread_local kernels::IdDeduper dedup;
  return &dedup;
}

std::string ContextName(uint32_t trainer, uint64_t step) {
  return "trainer " + std::to_string(trainer) + " step " + std::to_string(step);
}

}  // namespace

PsService::PsService(PsServiceOptions options)
    : ps_rank_(options.ps_rank),
      store_factory_(options.store_factory),
      before_control_(options.before_control),
      stores_named_by_id_(options.stores_named_by_id),
      call_server_(std::move(options.call_server)),
      end_server_calls_(std::move(options.end_server_calls)),
      run_on_worker_(std::move(options.run_on_worker)),
      fetch_reply_bytes_(std::max<int64_t>(1, options.fetch_reply_bytes)),
      storage_lost_(std::move(options.storage_lost)),
      test_data_loss_at_lookup_(options.test_data_loss_at_lookup),
      shards_(std::make_shared<ShardMap>()),
      open_to_any_sender_(options.open_to_any_sender),
      max_reply_values_(options.max_reply_values),
      last_expiry_(Clock::now()) {}

PsService::~PsService() {
  EndMigration();
  Abort(Status::Cancelled("parameter server shutting down"));
}

uint32_t PsService::plan_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_version_;
}

void PsService::set_rank(int rank) {
  ps_rank_ = rank;
}

void PsService::set_master(std::string routing_id) {
  std::lock_guard<std::mutex> lock(mu_);
  master_ = std::move(routing_id);
}

Status PsService::CheckMaster(const Responder& r) const {
  if (open_to_any_sender_) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  return CheckSender(r, Role::kMaster, master_, "the master");
}

Status PsService::CheckTrainerLocked(uint32_t trainer, const Responder& r) const {
  if (open_to_any_sender_) return Status::OK();
  // The trainers of the current plan only.
  return CheckSender(r, Role::kTrainer, trainer < trainers_.size() ? trainers_[trainer] : std::string(),
                     "trainer " + std::to_string(trainer));
}

namespace {

// Whether `path` lies strictly inside `root`, by their names (no "..").
bool Inside(const std::string& path, const std::string& root) {
  if (root.empty() || path.empty()) return false;
  const auto p = std::filesystem::path(path).lexically_normal();
  const auto r = std::filesystem::path(root).lexically_normal();
  const auto rel = p.lexically_relative(r);
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

}  // namespace

Status PsService::CheckSnapshotRequest(const std::string& dir, int64_t step) const {
  if (open_to_any_sender_) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  if (!job_) return Status::FailedPrecondition("SNAPSHOT: no shards created on this server yet");
  if (!Inside(dir, job_->checkpoint.dir)) {
    return Status::PermissionDenied("SNAPSHOT into " + dir + ": not inside the job's checkpoint.dir '" +
                                    job_->checkpoint.dir + "'");
  }
  // Sync: the trainers at the boundary `step` have had step - 2 applied
  // (they looked up step - 1), so a step beyond the next to apply plus one
  // is one no trainer can be at; it would only wait.
  const uint64_t next = gate_.applied_steps();
  if (job_->training.consistency == Consistency::kSync && static_cast<uint64_t>(step) > next + 1) {
    return Status::InvalidArgument("SNAPSHOT at step " + std::to_string(step) +
                                   ": a step the trainers cannot be at (this server applies step " +
                                   std::to_string(next) + " next)");
  }
  return Status::OK();
}

Status PsService::CheckDumpRequest(const std::string& dir) const {
  if (open_to_any_sender_) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  if (dump_dir_.empty() || std::filesystem::path(dir).lexically_normal() !=
                               std::filesystem::path(dump_dir_).lexically_normal()) {
    return Status::PermissionDenied("DUMP_SHARDS into " + dir + ": not the job's --dump_dir" +
                                    (dump_dir_.empty() ? std::string(" (it has none)") : " (" + dump_dir_ + ")"));
  }
  return Status::OK();
}

void PsService::set_trainers(std::vector<std::string> routing_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  trainers_ = std::move(routing_ids);
}

std::shared_ptr<const PsService::ShardMap> PsService::Shards() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shards_;
}

Status PsService::CreateShards(const JobConfig& job, const ShardingPlan& plan, const json& restore, bool keep,
                               uint32_t staged) {
  // Its own shards and those it backs up: a backup is the same shard,
  // restored from the same rows, applying the same pushes.
  const std::vector<ShardSpec> mine = plan.HeldBy(ps_rank_.load());
  for (const ShardSpec& spec : mine) {
    if (spec.table < 0 || spec.table >= static_cast<int>(job.tables.size())) {
      return Status::InvalidArgument("plan names table " + std::to_string(spec.table) + " which the job lacks");
    }
  }
  ShardMap from_migration;
  int64_t start_step = 0;
  if (staged != 0) {
    // Checked before anything is dropped: a migration that did not finish
    // leaves this server as it was.
    std::lock_guard<std::mutex> lock(mu_);
    if (!keep || plan.version != staged || !migration_ || migration_->to_version != staged ||
        !migration_->finished || !migration_->status.ok()) {
      return Status::FailedPrecondition("CREATE_SHARDS: no finished migration to plan version " +
                                        std::to_string(staged) + " on this server");
    }
    const std::map<uint32_t, uint32_t> kept = MatchKept(*shards_, mine);
    for (const ShardSpec& spec : mine) {
      if (kept.count(spec.shard_id) == 0 && migration_->staged.count(spec.shard_id) == 0) {
        return Status::FailedPrecondition("CREATE_SHARDS: shard " + std::to_string(spec.shard_id) +
                                          " is neither held nor staged by the migration");
      }
    }
    from_migration = std::move(migration_->staged);
    start_step = migration_->step;  // the boundary it was made at
    migration_.reset();
  } else {
    EndMigration();
  }
  auto shards = std::make_shared<ShardMap>();
  TESSERA_RETURN_IF_ERROR(ReleaseShards(keep ? mine : std::vector<ShardSpec>{}, shards.get()));
  const size_t kept = shards->size();
  ShardMap created;
  for (const ShardSpec& spec : mine) {
    if (shards->count(spec.shard_id)) continue;  // kept as it is
    if (auto it = from_migration.find(spec.shard_id); it != from_migration.end()) {
      (*shards)[spec.shard_id] = it->second;
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingShard> shard, NewShard(job, mine, spec, ""));
    created[spec.shard_id] = std::move(shard);
  }
  if (!restore.is_null()) {
    // Kept shards are the cut already; only the new ones load their rows.
    TESSERA_RETURN_IF_ERROR(Restore(restore, created));
    start_step = restore.value("step", int64_t{0});
  }
  for (auto& [id, shard] : created) (*shards)[id] = std::move(shard);
  // A precopy's sources remembered their updates until now.
  for (auto& [id, shard] : *shards) shard->TrackChanges(false);
  if (keep) {
    LOG(INFO) << "ps " << ps_rank_.load() << ": kept " << kept << " shard(s) as they were, "
              << (staged != 0 ? "took " + std::to_string(from_migration.size()) + " from the migration"
                              : "loaded " + std::to_string(created.size()));
  }
  Gate::Released parked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shards_ = std::move(shards);
    job_ = job;
    plan_version_ = plan.version;
    backups_.clear();
    for (const ShardSpec& spec : mine) {
      if (spec.ps != ps_rank_.load()) backups_.insert(spec.shard_id);
    }
    contexts_.clear();
    pushing_.clear();
    // Steps before start_step are done (a resumed job starts at its checkpoint).
    parked = gate_.Reset(job.training.consistency, job.cluster.num_trainers, static_cast<uint64_t>(start_step));
    LOG(INFO) << "ps " << ps_rank_.load() << ": holding " << shards_->size() << " shard(s) of job '" << job.name
              << "', plan version " << plan.version << ", " << ConsistencyName(job.training.consistency) << " mode";
  }
  // Lookups that waited under the old plan get PLAN_CHANGED, not the
  // INTERNAL of a dropped request: a new plan replaced theirs.
  AnswerReleased(std::move(parked));
  ReturnFreedHeapMemory();  // the old shards' and the restore's
  if (staged != 0 && end_server_calls_) end_server_calls_();  // the migration's fetches are over
  return Status::OK();
}

Status PsService::Promote(const ShardingPlan& plan, int rank) {
  // A server was lost: a migration (a precopy of new backups) toward the
  // plan it belonged to is void.
  EndMigration();
  const std::vector<ShardSpec> mine = plan.HeldBy(rank);
  std::lock_guard<std::mutex> lock(mu_);
  if (!job_) return Status::FailedPrecondition("PROMOTE: no shards created on this server yet");
  auto next = std::make_shared<ShardMap>();
  for (const ShardSpec& spec : mine) {
    auto it = shards_->find(spec.shard_id);
    if (it == shards_->end()) {
      return Status::FailedPrecondition("PROMOTE: plan version " + std::to_string(plan.version) + " has shard " +
                                        std::to_string(spec.shard_id) + " on this server, which does not hold it");
    }
    const ShardSpec& held = it->second->spec();
    if (held.table != spec.table || held.row_offset != spec.row_offset || held.num_rows != spec.num_rows ||
        held.col_offset != spec.col_offset || held.num_cols != spec.num_cols) {
      return Status::FailedPrecondition("PROMOTE: shard " + std::to_string(spec.shard_id) +
                                        " of the new plan is not the one this server holds");
    }
    (*next)[spec.shard_id] = it->second;
  }
  std::set<uint32_t> backups;
  for (const ShardSpec& spec : mine) {
    if (spec.ps != rank) backups.insert(spec.shard_id);
  }
  LOG(INFO) << "ps " << ps_rank_.load() << " -> " << rank << ": plan version " << plan_version_ << " -> "
            << plan.version << " (" << mine.size() - backups.size() << " shard(s) served, " << backups.size()
            << " backed up; " << shards_->size() - next->size() << " dropped)";
  shards_ = std::move(next);
  backups_ = std::move(backups);
  plan_version_ = plan.version;
  ps_rank_ = rank;
  return Status::OK();
}

Status PsService::ReleaseShards(const std::vector<ShardSpec>& keep, ShardMap* kept) {
  // A new plan's shard reopens what an old one of the same id holds on disk
  // (its RocksDB folder), so the old ones go first. Requests still computing
  // hold the old map; the plan that routed them is over, wait for them.
  std::shared_ptr<const ShardMap> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(shards_);
    shards_ = std::make_shared<ShardMap>();
    plan_version_ = 0;  // no plan: every request is refused until the new one is in
  }
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (old.use_count() > 1 && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (old.use_count() > 1) return Status::Unavailable("requests under the old plan still run after 60 s");
  for (const auto& [next_id, old_id] : MatchKept(*old, keep)) {
    const std::shared_ptr<EmbeddingShard>& shard = old->at(old_id);
    shard->Relabel(next_id);
    (*kept)[next_id] = shard;
  }
  return Status::OK();  // the others are destroyed with `old`
}

std::map<uint32_t, uint32_t> PsService::MatchKept(const ShardMap& old, const std::vector<ShardSpec>& next) const {
  // What stays: the same rows and columns of the same table, as they are,
  // under the new plan's id (a store with files named by id: the same id).
  // Old shards in id order, so the match does not depend on hashing.
  std::map<uint32_t, const EmbeddingShard*> by_id;
  for (const auto& [id, shard] : old) by_id[id] = shard.get();
  std::map<uint32_t, uint32_t> matched;
  std::set<uint32_t> taken;
  for (const ShardSpec& spec : next) {
    for (const auto& [id, shard] : by_id) {
      const ShardSpec& held = shard->spec();
      if (taken.count(id) || held.table != spec.table || held.row_offset != spec.row_offset ||
          held.num_rows != spec.num_rows || held.col_offset != spec.col_offset || held.num_cols != spec.num_cols ||
          (stores_named_by_id_ && id != spec.shard_id)) {
        continue;
      }
      taken.insert(id);
      matched[spec.shard_id] = id;
      break;
    }
  }
  return matched;
}

StatusOr<std::unique_ptr<EmbeddingShard>> PsService::NewShard(const JobConfig& job,
                                                              const std::vector<ShardSpec>& mine,
                                                              const ShardSpec& spec,
                                                              const std::string& store_instance) const {
  // The share of the server's memory budget its tiered store may use.
  double total_bytes = 0;
  for (const ShardSpec& s : mine) total_bytes += static_cast<double>(s.num_rows) * job.tables[s.table].RowBytes();
  const double bytes = static_cast<double>(spec.num_rows) * job.tables[spec.table].RowBytes();
  return EmbeddingShard::Create(spec, job.tables[spec.table], store_factory_,
                                total_bytes > 0 ? bytes / total_bytes : 1.0, store_instance);
}

void PsService::Abort(const Status& reason) {
  Gate::Released parked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked = gate_.Abort(reason);
  }
  AnswerReleased(std::move(parked));
}

Status PsService::StorageFailure(const Status& st) {
  if (st.code() != StatusCode::kDataLoss || !storage_lost_) return st;
  const Status lost = Status::Unavailable("parameter server " + std::to_string(ps_rank_.load()) +
                                          " found rows of its store damaged (" + st.message() +
                                          "): it leaves the job");
  if (!lost_storage_.exchange(true)) {
    LOG(ERROR) << lost;
    Abort(lost);  // every later request, and those parked, get `lost`
    storage_lost_(st);
  }
  return lost;
}

void PsService::AnswerReleased(Gate::Released&& released) {
  if (!released.status.ok()) {
    for (DeferredLookup& d : released.lookups) d.responder.ReplyError(released.status);
    return;
  }
  const size_t n = released.lookups.size();
  for (size_t i = 0; i < n; ++i) {
    DeferredLookup& d = released.lookups[i];
    if (i + 1 < n && run_on_worker_) {
      // std::function needs a copyable task; the Responder is not.
      auto moved = std::make_shared<DeferredLookup>(std::move(d));
      run_on_worker_([this, moved] { ServeLookup(std::move(moved->request), std::move(moved->responder)); });
    } else {
      ServeLookup(std::move(d.request), std::move(d.responder));  // the last one here
    }
  }
}

bool PsService::WaitForShutdown(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return shutdown_cv_.wait_for(lock, timeout, [this] { return shutdown_; });
}

bool PsService::shutdown_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

void PsService::Handle(Message&& request, Responder responder) {
  switch (request.header.op) {
    case Opcode::kLookup:
      HandleLookup(std::move(request), std::move(responder));
      return;
    case Opcode::kPushGradients:
      HandlePush(std::move(request), std::move(responder));
      return;
    case Opcode::kFetchRows:
      HandleFetchRows(std::move(request), std::move(responder));
      return;
    default:
      if (Status sender = CheckMaster(responder); !sender.ok()) {
        ++errors_;
        responder.ReplyError(sender);
        return;
      }
      if (before_control_) before_control_(request.header.op);
      HandleControl(std::move(request), std::move(responder));
  }
}

void PsService::HandleLookup(Message&& m, Responder r) {
  const Header header = m.header;
  auto decoded = DecodeLookupRequest(std::move(m));
  if (!decoded.ok()) {
    ++errors_;
    r.ReplyError(decoded.status());
    return;
  }
  LookupRequest req = std::move(decoded).value();
  std::unique_lock<std::mutex> lock(mu_);
  if (Status sender = CheckTrainerLocked(req.meta.trainer, r); !sender.ok()) {
    ++errors_;
    r.ReplyError(sender);
    return;
  }
  if (Status failure = gate_.failure(); !failure.ok()) {
    r.ReplyError(failure);
    return;
  }
  if (!job_) {
    r.ReplyError(Status::FailedPrecondition("no shards created on this server yet"));
    return;
  }
  if (header.plan_version != plan_version_) {
    r.ReplyError(Status::PlanChanged("request has plan version " + std::to_string(header.plan_version) +
                                     ", server has " + std::to_string(plan_version_)));
    return;
  }
  if (req.meta.trainer >= static_cast<uint32_t>(job_->cluster.num_trainers)) {
    ++errors_;
    r.ReplyError(Status::InvalidArgument("trainer rank " + std::to_string(req.meta.trainer) + " not in this job"));
    return;
  }
  const uint64_t step = req.meta.step;
  const uint32_t req_trainer = req.meta.trainer;
  // Sync: a lookup of the next step (prefetch) parks until this step is
  // applied. Async: one that asks to (kLookupAfterOwnPush) and whose
  // trainer's push of the step before is still to come here (its context is
  // open or being applied) parks until that push is applied, so that a
  // prefetch misses none of its trainer's own updates.
  // Meanwhile its rows come up from RocksDB, so that only their values wait
  // for the update. The ids are copied first: parking moves the request.
  const bool sync = job_->training.consistency == Consistency::kSync;
  const bool own_push_pending = !sync && (req.meta.flags & kLookupAfterOwnPush) &&
                                !(req.meta.flags & kLookupNoContext) && step > 0 &&
                                (contexts_.count({req_trainer, step - 1}) > 0 ||
                                 pushing_.count({req_trainer, step - 1}) > 0);
  WarmList warm;
  if ((sync && step > gate_.applied_steps()) || own_push_pending) warm = WarmableRowsLocked(req);
  DeferredLookup lookup{std::move(req), std::move(r)};
  Status refusal;
  switch (gate_.OnLookup(req_trainer, step, &lookup, &refusal, own_push_pending)) {
    case LookupAction::kServe:
      lock.unlock();
      ServeLookup(std::move(lookup.request), std::move(lookup.responder));
      return;
    case LookupAction::kPark:
      lock.unlock();
      if (!warm.entries.empty()) WarmRows(std::move(warm));
      return;
    case LookupAction::kRefuse:
      // Too far ahead or too many parked (the failure was checked above, and
      // Abort takes mu_ too).
      ++errors_;
      lookup.responder.ReplyError(refusal);
      return;
  }
}

PsService::WarmList PsService::WarmableRowsLocked(const LookupRequest& req) const {
  WarmList warm;
  if (!shards_) return warm;
  size_t id = 0;
  for (const LookupEntry& e : req.entries.span()) {
    auto it = shards_->find(e.shard);
    // Evaluations create nothing, backups' copies read nothing.
    if (it != shards_->end() && it->second->warms() && !e.context_only() && !(req.meta.flags & kLookupNoContext)) {
      auto ids = req.ids.span().subspan(id, e.num_ids);
      warm.entries.push_back({it->second.get(), std::vector<int64_t>(ids.begin(), ids.end())});
    }
    id += e.num_ids;
  }
  if (!warm.entries.empty()) warm.shards = shards_;
  return warm;
}

void PsService::WarmRows(WarmList&& warm) {
  auto task = [this, w = std::make_shared<WarmList>(std::move(warm))] {
    std::vector<int64_t> unique;
    std::vector<int32_t> inverse;
    for (auto& [shard, ids] : w->entries) {
      ThreadDeduper()->Run(ids, &unique, &inverse);
      // A hint: an error here (a bad id, RocksDB) is the serve's to report.
      if (shard->Warm(unique).ok()) rows_warmed_ += static_cast<int64_t>(unique.size());
    }
  };
  if (run_on_worker_) {
    run_on_worker_(std::move(task));
  } else {
    task();
  }
}

void PsService::ServeLookup(LookupRequest&& req, Responder r) {
  auto shards = Shards();
  // Size the reply and check every entry before computing anything.
  size_t total = 0, bag = 0;
  std::vector<EmbeddingShard*> entry_shards;
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const LookupEntry& e = req.entries[i];
    auto it = shards->find(e.shard);
    if (it == shards->end()) {
      ++errors_;
      r.ReplyError(Status::NotFound("shard " + std::to_string(e.shard) + " is not on parameter server " +
                                    std::to_string(ps_rank_.load())));
      return;
    }
    int64_t non_empty = 0;
    for (uint32_t b = 0; b < e.num_bags; ++b) non_empty += req.lengths[bag + b] > 0;
    bag += e.num_bags;
    entry_shards.push_back(it->second.get());
    const int64_t rows = e.rows() ? e.num_ids : it->second->OutRows(non_empty, e.num_ids);
    if (!e.context_only()) total += static_cast<size_t>(rows) * it->second->cols();
  }
  if (total > max_reply_values_) {
    ++errors_;
    r.ReplyError(Status::ResourceExhausted("a lookup whose reply would hold " + std::to_string(total) +
                                           " values, more than the " + std::to_string(max_reply_values_) +
                                           " one reply may: split the batch"));
    return;
  }
  const int64_t cpu_start = ThreadCpuNanos();
  std::vector<float> values(total);
  Context ctx;
  ctx.entries.resize(req.entries.size());
  size_t id = 0, weight = 0, out = 0;
  bag = 0;
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const LookupEntry& e = req.entries[i];
    EmbeddingShard* shard = entry_shards[i];
    auto lengths = req.lengths.span().subspan(bag, e.num_bags);
    auto ids = req.ids.span().subspan(id, e.num_ids);
    std::span<const float> weights;
    if (e.weighted()) weights = req.weights.span().subspan(weight, e.num_ids);
    // A backup's copy opens the context only: the primary sent the values.
    float* dst = e.context_only() ? nullptr : values.data() + out;
    // A lookup without a context (an evaluation's) creates no rows.
    const bool evaluation = (req.meta.flags & kLookupNoContext) != 0;
    Status st = e.rows() ? shard->ForwardRows(ids, ThreadDeduper(), &ctx.entries[i], dst, evaluation)
                         : shard->Forward(lengths, ids, weights, e.sum_partial(), ThreadDeduper(), &ctx.entries[i],
                                          dst, evaluation);
    if (st.ok() && i == 0 && test_data_loss_at_lookup_ > 0 && ++lookups_started_ == test_data_loss_at_lookup_) {
      st = Status::DataLoss("reading shard " + std::to_string(e.shard) + ": a damaged row (--test_data_loss_at_lookup " +
                            std::to_string(test_data_loss_at_lookup_) + ")");
    }
    if (!st.ok()) {
      ++errors_;
      r.ReplyError(StorageFailure(st));
      return;
    }
    bag += e.num_bags;
    id += e.num_ids;
    if (e.weighted()) weight += e.num_ids;
    if (!e.context_only()) out += static_cast<size_t>(ctx.entries[i].out_rows) * shard->cols();
  }
  ctx.created = Clock::now();
  lookup_ns_ += ThreadCpuNanos() - cpu_start;
  if (!(req.meta.flags & kLookupNoContext)) {
    Gate::Released released;  // lookups that waited for a push that will not come now
    Status bound;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ExpireContexts(&released);
      bound = BoundContextsLocked(req.meta.trainer, req.meta.step, &released);
      // A retried lookup replaces its earlier context: lookups are idempotent.
      if (bound.ok()) contexts_[{req.meta.trainer, req.meta.step}] = std::move(ctx);
    }
    AnswerReleased(std::move(released));
    if (!bound.ok()) {
      ++errors_;
      r.ReplyError(bound);
      return;
    }
  }
  ++lookups_;
  ids_looked_up_ += static_cast<int64_t>(req.ids.size());
  r.Reply(EncodeLookupResponse(req.source.header, std::move(values), (req.meta.flags & kLookupBf16Values) != 0));
}

Status PsService::BoundContextsLocked(uint32_t trainer, uint64_t step, Gate::Released* released) {
  // A context far behind the trainer's newest step will never see its push
  // (a trainer pushes a step before it looks up two ahead): dropped.
  auto first = contexts_.lower_bound({trainer, 0});
  while (first != contexts_.end() && first->first.first == trainer &&
         first->first.second + kMaxContextsPerTrainer / 2 < step) {
    AppendReleased(gate_.OwnPushSettled(trainer, first->first.second), released);
    first = contexts_.erase(first);
  }
  // A trainer has a step or two open (prefetch); many more are a client
  // that never pushes, or a forger filling this server's memory.
  const auto last = contexts_.lower_bound({trainer + 1, 0});
  const auto open = static_cast<size_t>(std::distance(first, last));
  if (open >= kMaxContextsPerTrainer && contexts_.count({trainer, step}) == 0) {
    return Status::ResourceExhausted("trainer " + std::to_string(trainer) + " has " + std::to_string(open) +
                                     " lookups without their push open on this server, the most it may have; "
                                     "nothing looked up");
  }
  return Status::OK();
}

Status PsService::PushToRowGrads(const PushRequest& push, const Context& ctx, std::vector<EntryGrads>* out) {
  if (push.entries.size() != ctx.entries.size()) {
    return Status::InvalidArgument("push has " + std::to_string(push.entries.size()) + " entries but the lookup had " +
                                   std::to_string(ctx.entries.size()));
  }
  for (float g : push.grads.span()) {
    if (!std::isfinite(g)) return Status::InvalidArgument("non-finite gradient in push; nothing applied");
  }
  auto shards = Shards();
  const int64_t cpu_start = ThreadCpuNanos();
  out->clear();
  out->resize(ctx.entries.size());
  size_t offset = 0;
  for (size_t i = 0; i < ctx.entries.size(); ++i) {
    const PushEntry& pe = push.entries[i];
    const ForwardContextEntry& ce = ctx.entries[i];
    auto it = shards->find(ce.shard);
    if (pe.shard != ce.shard || it == shards->end()) {
      return Status::InvalidArgument("push entry " + std::to_string(i) + " names shard " + std::to_string(pe.shard) +
                                     " but the lookup used shard " + std::to_string(ce.shard));
    }
    EmbeddingShard* shard = it->second.get();
    if (pe.rows != ce.out_rows || pe.cols != static_cast<uint32_t>(shard->cols())) {
      return Status::InvalidArgument("push entry " + std::to_string(i) + " has shape " + std::to_string(pe.rows) +
                                     "x" + std::to_string(pe.cols) + ", the lookup returned " +
                                     std::to_string(ce.out_rows) + "x" + std::to_string(shard->cols()));
    }
    EntryGrads& g = (*out)[i];
    g.shard = ce.shard;
    g.ids = ce.unique_ids;
    g.rows = ce.row_ptrs;
    g.row_store = ce.row_store;
    g.grads = std::make_unique_for_overwrite<float[]>(g.ids.size() * shard->cols());
    TESSERA_RETURN_IF_ERROR(shard->Backward(ce, push.grads.data() + offset, g.grads.get()));
    offset += static_cast<size_t>(pe.rows) * pe.cols;
  }
  backward_ns_ += ThreadCpuNanos() - cpu_start;
  return Status::OK();
}

Status PsService::ApplyMerged(const std::vector<const std::vector<EntryGrads>*>& pushes) {
  auto shards = Shards();
  struct CpuTimer {
    std::atomic<int64_t>* total;
    int64_t start;
    ~CpuTimer() { *total += ThreadCpuNanos() - start; }
  } timer{&apply_ns_, ThreadCpuNanos()};
  // Group the entries by shard, keeping the given order within a shard.
  std::map<uint32_t, std::vector<const EntryGrads*>> by_shard;
  for (const auto* push : pushes) {
    for (const EntryGrads& g : *push) by_shard[g.shard].push_back(&g);
  }
  // Kept by the thread between steps: fresh buffers of a step's size would
  // be fresh pages, zeroed by the kernel on every step.
  thread_local std::vector<int64_t> all_ids, unique;
  thread_local std::vector<int32_t> inverse;
  thread_local std::vector<float> summed;
  thread_local std::vector<float*> rows;
  thread_local std::vector<kernels::RowRun> runs;
  for (auto& [shard_id, parts] : by_shard) {
    EmbeddingShard* shard = shards->at(shard_id).get();
    const int cols = shard->cols();
    if (parts.size() == 1) {
      TESSERA_RETURN_IF_ERROR(shard->Apply(parts[0]->ids, parts[0]->grads.get(), parts[0]->rows, parts[0]->row_store));
      continue;
    }
    all_ids.clear();
    for (const EntryGrads* p : parts) all_ids.insert(all_ids.end(), p->ids.begin(), p->ids.end());
    ThreadDeduper()->Run(all_ids, &unique, &inverse);
    // Each distinct row's gradient: the parts' rows added in rank order.
    runs.clear();
    for (const EntryGrads* p : parts) runs.push_back({p->grads.get(), static_cast<int64_t>(p->ids.size())});
    summed.resize(unique.size() * cols);
    kernels::SumRowsByIndexCpu(cols, runs, inverse.data(), static_cast<int64_t>(unique.size()), summed.data());
    // The merged ids' rows, where every part knows its own in one store.
    const RowStore* row_store = parts[0]->row_store;
    for (const EntryGrads* p : parts) {
      if (p->row_store != row_store || p->rows.size() != p->ids.size()) row_store = nullptr;
    }
    rows.resize(row_store != nullptr ? unique.size() : 0);
    if (row_store != nullptr) {
      size_t k = 0;
      for (const EntryGrads* p : parts) {
        for (size_t i = 0; i < p->ids.size(); ++i, ++k) rows[inverse[k]] = p->rows[i];
      }
    }
    TESSERA_RETURN_IF_ERROR(shard->Apply(unique, summed.data(), rows, row_store));
  }
  return Status::OK();
}

void PsService::HandlePush(Message&& m, Responder r) {
  auto decoded = DecodePushRequest(std::move(m));
  if (!decoded.ok()) {
    ++errors_;
    r.ReplyError(decoded.status());
    return;
  }
  PushRequest push = std::move(decoded).value();
  const uint32_t trainer = push.meta.trainer;
  const uint64_t step = push.meta.step;
  Context ctx;
  bool sync = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status sender = CheckTrainerLocked(trainer, r); !sender.ok()) {
      ++errors_;
      r.ReplyError(sender);
      return;
    }
    if (Status failure = gate_.failure(); !failure.ok()) {
      r.ReplyError(failure);
      return;
    }
    if (!job_ || trainer >= static_cast<uint32_t>(job_->cluster.num_trainers)) {
      ++errors_;
      r.ReplyError(Status::InvalidArgument("trainer rank " + std::to_string(trainer) + " not in this job"));
      return;
    }
    if (push.source.header.plan_version != plan_version_) {
      r.ReplyError(Status::PlanChanged("push has plan version " + std::to_string(push.source.header.plan_version) +
                                       ", server has " + std::to_string(plan_version_)));
      return;
    }
    if (Status st = gate_.CheckPush(trainer, step); !st.ok()) {
      r.ReplyError(st);
      return;
    }
    auto it = contexts_.find({trainer, step});
    if (it == contexts_.end()) {
      ++errors_;
      r.ReplyError(Status::NotFound("no backward context for " + ContextName(trainer, step) +
                                    " (never looked up here, or expired)"));
      return;
    }
    // Taken out while the gradients are checked; put back if they are bad.
    // Until it is applied, the trainer's lookup of the next step waits.
    ctx = std::move(it->second);
    contexts_.erase(it);
    sync = job_->training.consistency == Consistency::kSync;
    if (!sync) pushing_.insert({trainer, step});
  }
  // Async: the push is applied or will never be; the trainer's parked
  // lookup of the next step may go on (after this push's reply).
  auto settle = [&]() -> Gate::Released {
    std::lock_guard<std::mutex> lock(mu_);
    if (pushing_.erase({trainer, step}) == 0) return {};  // a new plan cleared it
    return gate_.OwnPushSettled(trainer, step);
  };

  std::vector<EntryGrads> grads;
  Status st = PushToRowGrads(push, ctx, &grads);
  if (!st.ok()) {
    ++errors_;
    std::lock_guard<std::mutex> lock(mu_);
    pushing_.erase({trainer, step});
    contexts_.emplace(std::make_pair(trainer, step), std::move(ctx));
    r.ReplyError(st);
    return;
  }

  // Async: this push's gradients. Sync: none until the step's last push,
  // then every trainer's, in rank order.
  StatusOr<std::vector<std::vector<EntryGrads>>> ready = [&]() -> StatusOr<std::vector<std::vector<EntryGrads>>> {
    // New shards may have replaced the ones this push was computed against
    // (the job's servers changed): it must not count in the new plan's steps.
    std::lock_guard<std::mutex> lock(mu_);
    if (push.source.header.plan_version != plan_version_) {
      return Status::PlanChanged("the plan changed to version " + std::to_string(plan_version_) +
                                 " while the push was computed");
    }
    return gate_.OnPush(trainer, step, std::move(grads));
  }();
  if (!ready.ok()) {
    r.ReplyError(ready.status());
    if (!sync) AnswerReleased(settle());
    return;
  }
  // Sync: parked with its step, the push is as good as applied.
  if (sync) r.ReplyOk();
  if (ready->empty()) return;

  std::vector<const std::vector<EntryGrads>*> in_order;
  for (const std::vector<EntryGrads>& g : *ready) in_order.push_back(&g);
  st = StorageFailure(ApplyMerged(in_order));
  if (!st.ok()) {
    const Status failure = st.WithContext(sync ? "applying step " + std::to_string(step) : "applying gradients");
    LOG(ERROR) << failure;
    if (!sync) r.ReplyError(failure);
    Abort(failure);  // answers the parked lookups with the failure
    if (!sync) settle();
    return;
  }
  pushes_applied_ += static_cast<int64_t>(ready->size());
  if (!sync) {
    r.ReplyOk();  // first: the trainer waits for it before its step ends
    AnswerReleased(settle());
    return;
  }
  AnswerReleased(gate_.Applied(step));
}

void PsService::AppendReleased(Gate::Released&& from, Gate::Released* to) {
  if (from.lookups.empty()) return;
  // OwnPushSettled hands back lookups to serve (OK); those are all that
  // these gather.
  DCHECK(from.status.ok() && to->status.ok());
  for (DeferredLookup& d : from.lookups) to->lookups.push_back(std::move(d));
}

void PsService::ExpireContexts(Gate::Released* released) {
  const auto now = Clock::now();
  if (!job_ || now - last_expiry_ < std::chrono::seconds(1)) return;
  last_expiry_ = now;
  const auto ttl = std::chrono::milliseconds(job_->runtime.context_ttl_ms);
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    if (now - it->second.created > ttl) {
      LOG(WARNING) << "backward context of " << ContextName(it->first.first, it->first.second)
                   << " expired without a push";
      AppendReleased(gate_.OwnPushSettled(it->first.first, it->first.second), released);
      it = contexts_.erase(it);
    } else {
      ++it;
    }
  }
}

StatusOr<std::vector<std::string>> PsService::DumpShards(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  auto shards = Shards();
  std::set<uint32_t> backups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    backups = backups_;
  }
  std::vector<std::string> files;
  for (const auto& [id, shard] : *shards) {
    std::vector<int64_t> ids;
    std::vector<float> rows;
    const int width = shard->store()->row_width();
    TESSERA_RETURN_IF_ERROR(shard->store()->ForEach([&](int64_t row_id, const float* row) {
      ids.push_back(row_id);
      rows.insert(rows.end(), row, row + width);
      return Status::OK();
    }));
    const ShardSpec& s = shard->spec();
    json meta = {{"table", shard->table().name}, {"shard_id", s.shard_id},  {"row_offset", s.row_offset},
                 {"num_rows", s.num_rows},       {"col_offset", s.col_offset}, {"num_cols", s.num_cols},
                 {"row_width", width}};
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<ParamArray> arrays;
    arrays.push_back(ParamArray::Text("meta", meta.dump()));
    arrays.push_back(ParamArray::Ints("ids", n, 1, std::move(ids)));
    arrays.push_back(ParamArray::Floats("rows", n, width, std::move(rows)));
    // A backup's copy is written apart, for checks that it equals the
    // primary's: the dump itself is the primaries'.
    const std::string path = dir + (backups.count(id) ? "/backup" : "/shard") + std::to_string(id) + ".params";
    TESSERA_RETURN_IF_ERROR(WriteParamFile(path, arrays));
    files.push_back(path);
  }
  return files;
}

json PsService::Stats() const {
  auto shards = Shards();
  json s = json::array();
  for (const auto& [id, shard] : *shards) {
    const RowStoreStats st = shard->store()->Stats();
    json tiers = json::array();
    for (const TierStats& t : st.tiers) {
      const int64_t lookups = t.hits + t.misses;
      tiers.push_back({{"tier", t.name},
                       {"hits", t.hits},
                       {"misses", t.misses},
                       {"hit_rate", lookups > 0 ? static_cast<double>(t.hits) / static_cast<double>(lookups) : 0.0},
                       {"evictions", t.evictions},
                       {"writebacks", t.writebacks},
                       {"rows", t.rows_resident},
                       {"bytes", t.bytes_resident},
                       {"budget_bytes", t.byte_budget}});
    }
    s.push_back({{"shard_id", id},
                 {"table", shard->table().name},
                 {"rows_materialized", shard->store()->size()},
                 {"tiers", tiers},
                 {"rocksdb_rows_read", st.rocksdb_rows_read},
                 {"rocksdb_rows_written", st.rocksdb_rows_written},
                 {"rocksdb_bytes_read", st.rocksdb_bytes_read},
                 {"rocksdb_bytes_written", st.rocksdb_bytes_written},
                 {"rocksdb_write_stalls", st.rocksdb_write_stalls}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  return json{{"ps_rank", ps_rank_.load()},
              {"shards", s},
              {"lookups", lookups_.load()},
              {"ids_looked_up", ids_looked_up_.load()},
              {"rows_warmed", rows_warmed_.load()},
              {"pushes_applied", pushes_applied_.load()},
              {"errors", errors_.load()},
              {"open_contexts", contexts_.size()},
              {"lookup_compute_ms", lookup_ns_.load() / 1e6},
              {"backward_compute_ms", backward_ns_.load() / 1e6},
              {"apply_compute_ms", apply_ns_.load() / 1e6},
              {"applied_steps", gate_.applied_steps()}};
}

void PsService::HandleControl(Message&& m, Responder r) {
  const Opcode op = m.header.op;
  auto body = DecodeJson(m);
  if (!body.ok()) {
    r.ReplyError(body.status());
    return;
  }
  try {
    switch (op) {
      case Opcode::kCreateShards: {
        auto req = CreateShardsRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        auto job = ParseJobConfigJson(req->job, "");
        if (!job.ok()) {
          r.ReplyError(job.status().WithContext("job config"));
          return;
        }
        auto plan = ShardingPlan::FromJson(req->plan);
        if (!plan.ok()) {
          r.ReplyError(plan.status());
          return;
        }
        // The server's place in this plan (its rank), which changes when
        // the job's servers change.
        if (req->rank >= 0) {
          if (req->rank >= plan->num_ps) {
            r.ReplyError(Status::InvalidArgument("rank " + std::to_string(req->rank) + " is not in a plan of " +
                                                 std::to_string(plan->num_ps) + " servers"));
            return;
          }
          set_rank(req->rank);
        }
        Status st = CreateShards(*job, *plan, req->restore, req->keep, static_cast<uint32_t>(req->staged));
        if (!st.ok()) {
          r.ReplyError(st);
          return;
        }
        set_trainers(std::move(req->trainers));
        {
          std::lock_guard<std::mutex> lock(mu_);
          dump_dir_ = req->dump_dir;
        }
        r.ReplyOk();
        return;
      }
      case Opcode::kPromote: {
        auto req = PromoteRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        auto plan = ShardingPlan::FromJson(req->plan);
        if (!plan.ok()) {
          r.ReplyError(plan.status());
          return;
        }
        if (req->rank >= plan->num_ps) {
          r.ReplyError(Status::InvalidArgument("rank " + std::to_string(req->rank) + " is not in a plan of " +
                                               std::to_string(plan->num_ps) + " servers"));
          return;
        }
        Status st = Promote(*plan, req->rank);
        if (!st.ok()) {
          r.ReplyError(st);
          return;
        }
        set_trainers(std::move(req->trainers));
        r.ReplyOk();
        return;
      }
      case Opcode::kMigrate: {
        auto req = MigrateRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        auto responder = std::make_shared<Responder>(std::move(r));
        Migrate(*req, [responder](StatusOr<json> result) {
          if (result.ok()) {
            responder->Reply(EncodeJsonReply(responder->request_header(), *result));
          } else {
            responder->ReplyError(result.status());
          }
        });
        return;
      }
      case Opcode::kDumpShards: {
        auto req = DumpShardsRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        if (Status where = CheckDumpRequest(req->dir); !where.ok()) {
          ++errors_;
          r.ReplyError(where);
          return;
        }
        auto files = DumpShards(req->dir);
        if (!files.ok()) {
          r.ReplyError(files.status());
          return;
        }
        r.Reply(EncodeJsonReply(r.request_header(), json{{"files", *files}}));
        return;
      }
      case Opcode::kSnapshot: {
        auto req = SnapshotRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        if (Status request = CheckSnapshotRequest(req->dir, req->step); !request.ok()) {
          ++errors_;
          r.ReplyError(request);
          return;
        }
        auto shards = Snapshot(req->dir, req->step);
        if (!shards.ok()) {
          r.ReplyError(shards.status());
          return;
        }
        r.Reply(EncodeJsonReply(r.request_header(), json{{"shards", *shards}}));
        return;
      }
      case Opcode::kServerStats:
        r.Reply(EncodeJsonReply(r.request_header(), Stats()));
        return;
      case Opcode::kAbort: {
        auto req = AbortRequest::Parse(*body);
        if (!req.ok()) {
          r.ReplyError(req.status());
          return;
        }
        LOG(ERROR) << "ps " << ps_rank_.load() << ": aborted: " << req->reason;
        Abort(Status::Aborted(req->reason));
        r.ReplyOk();
        return;
      }
      case Opcode::kShutdown: {
        r.ReplyOk();
        {
          std::lock_guard<std::mutex> lock(mu_);
          shutdown_ = true;
        }
        shutdown_cv_.notify_all();
        return;
      }
      default:
        r.ReplyError(Status::Unimplemented(std::string("parameter server does not handle ") + OpcodeName(op)));
    }
  } catch (const json::exception& e) {
    r.ReplyError(Status::InvalidArgument(std::string(OpcodeName(op)) + ": malformed body: " + e.what()));
  }
}

}  // namespace tessera
