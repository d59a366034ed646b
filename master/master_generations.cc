// The master's side of a job whose parameter servers change while it trains.
//
// Every set of servers a job runs on is a generation, numbered from 1; its
// number is the plan version, so a request routed by an older plan is
// refused by every server (PLAN_CHANGED) and nothing of an old generation is
// applied in a new one. A generation starts from a consistent cut — a
// checkpoint, or step 0 — on which every server, trainer and the plan agree:
//   - a lost server: the cut is the newest checkpoint (a rollback; the
//     trainers replay from there, and in sync mode end where a run without
//     the loss ends);
//   - an added or removed server: the cut is a checkpoint taken at the step
//     boundary where the trainers stopped for the change (no rollback).
#include <algorithm>
#include <iostream>
#include <thread>

#include <glog/logging.h>

#include "common/messages.h"
#include "master/checkpoint_files.h"
#include "master/master.h"
#include "master/planner.h"

namespace tessera {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

// What the new plan places on a server that did not hold it under the old
// one: row elements (rows x columns) and their bytes with optimizer state.
// Servers are named by member id, so a survivor keeps its identity.
struct Movement {
  int64_t elements = 0, total_elements = 0;
  double bytes = 0;
};

Movement Moved(const JobConfig& job, const ShardingPlan& old_plan, const std::vector<int>& old_members,
               const ShardingPlan& plan, const std::vector<int>& members) {
  Movement m;
  for (const ShardSpec& n : plan.shards) {
    const int owner = members[n.ps];
    int64_t kept = 0;
    for (const ShardSpec& o : old_plan.shards) {
      if (o.table != n.table || o.ps >= static_cast<int>(old_members.size()) || old_members[o.ps] != owner) continue;
      const int64_t rows = std::min(o.row_offset + o.num_rows, n.row_offset + n.num_rows) -
                           std::max(o.row_offset, n.row_offset);
      const int64_t cols = std::min(o.col_offset + o.num_cols, n.col_offset + n.num_cols) -
                           std::max(o.col_offset, n.col_offset);
      if (rows > 0 && cols > 0) kept += rows * cols;
    }
    const TableConfig& t = job.tables[n.table];
    const int64_t moved = n.num_rows * n.num_cols - kept;
    m.elements += moved;
    m.total_elements += n.num_rows * n.num_cols;
    m.bytes += static_cast<double>(moved) * static_cast<double>(t.RowBytes()) / t.embedding_dim;
  }
  return m;
}

}  // namespace

bool Master::ServersDiffer() const {
  if (backups_missing_) return true;
  for (const auto& [id, p] : ps_) {
    const bool in_generation = std::find(generation_ps_.begin(), generation_ps_.end(), id) != generation_ps_.end();
    if (p.leaving || (!in_generation && p.ready)) return true;
  }
  return false;
}

bool Master::PrecopyFirst() const {
  return job_.runtime.precopy && !precopy_failed_ && state_ == State::kRunning && plan_.has_value();
}

bool Master::ServerChangePending() const {
  if (!ServersDiffer()) return false;
  // A precopy toward the servers there are now runs first (MaybeStartPrecopy
  // starts it, also when one registered a moment ago); the boundary then
  // brings its copies up to date.
  if (PrecopyFirst() && (!precopy_ || precopy_->members != NextServers() || !precopy_->Finished())) return false;
  return true;
}

bool Master::Precopy::Finished() const {
  std::lock_guard<std::mutex> lock(calls.shared->mu);
  return calls.shared->done == calls.members.size();
}

Status Master::Precopy::Outcome(int64_t* rows, int64_t* bytes) const {
  std::lock_guard<std::mutex> lock(calls.shared->mu);
  for (size_t i = 0; i < calls.members.size(); ++i) {
    const auto& reply = calls.shared->replies[i];
    if (!reply.has_value()) return Status::Unavailable("no reply yet");
    if (!reply->ok()) return reply->status();
    auto body = DecodeJson(**reply);
    if (!body.ok()) return body.status();
    if (rows != nullptr) *rows += body->value("rows", int64_t{0});
    if (bytes != nullptr) *bytes += body->value("bytes", int64_t{0});
  }
  return Status::OK();
}

Status Master::MigrationBodies(const ShardingPlan& plan, const std::vector<int>& members, int64_t step,
                               MigratePhase phase, std::vector<int>* involved, std::vector<json>* bodies) const {
  if (!plan_) return Status::FailedPrecondition("no running plan to migrate from");
  // Every server of either plan takes part: the old ones serve their rows,
  // the new ones fetch theirs; a leaving server only serves.
  *involved = members;
  std::vector<std::string> sources, fetchers;
  for (int m : generation_ps_) {
    auto it = ps_.find(m);
    if (it == ps_.end()) return Status::Unavailable(DescribeServer(m) + " was lost before the migration");
    sources.push_back(it->second.endpoint);
    if (std::find(involved->begin(), involved->end(), m) == involved->end()) involved->push_back(m);
  }
  for (int m : *involved) {
    auto it = ps_.find(m);
    if (it == ps_.end()) return Status::Unavailable(DescribeServer(m) + " left before the migration");
    fetchers.push_back(it->second.routing_id);
  }
  MigrateRequest req;
  req.phase = phase;
  req.job = job_.ToJson();
  req.plan = plan.ToJson();
  req.step = step;
  req.from_version = plan_->version;
  req.from_plan = plan_->ToJson();
  req.sources = sources;
  req.fetchers = fetchers;
  bodies->clear();
  for (size_t i = 0; i < involved->size(); ++i) {
    req.rank = i < members.size() ? static_cast<int>(i) : -1;
    bodies->push_back(req.ToJson());
  }
  return Status::OK();
}

void Master::MaybeStartPrecopy() {
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!PrecopyFirst() || !ServersDiffer()) return;
    members = NextServers();
    if (precopy_ && precopy_->members == members) return;  // running or done, for these servers
  }
  auto fail = [&](const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    precopy_failed_ = true;
    LOG(WARNING) << "the rows that change servers cannot be copied while the job trains (" << why
                 << "); they move at the next step boundary";
  };
  auto plan = PlanServers(members, "they are copied while the job trains; at the next boundary only the rows "
                                   "updated meanwhile move again");
  if (!plan.ok()) return fail(plan.status());
  Precopy pre;
  pre.plan = *plan;
  pre.members = members;
  std::vector<json> bodies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status st = MigrationBodies(*plan, members, 0, MigratePhase::kPrecopy, &pre.involved, &bodies); !st.ok()) {
      precopy_failed_ = true;
      LOG(WARNING) << "no precopy of the rows that change servers: " << st;
      return;
    }
  }
  pre.started = Clock::now();
  pre.calls = StartServerCalls(pre.involved, Opcode::kMigrate, bodies, milliseconds(3600000));
  std::lock_guard<std::mutex> lock(mu_);
  LOG(INFO) << "copying the rows that change servers while the job trains (plan version " << plan->version << ")";
  precopy_ = std::move(pre);
}

std::vector<int> Master::NextServers() const {
  // Survivors keep their plan ranks' order; newcomers follow, oldest first,
  // once ready for orders.
  std::vector<int> next;
  for (int id : generation_ps_) {
    auto it = ps_.find(id);
    if (it != ps_.end() && !it->second.leaving) next.push_back(id);
  }
  for (const auto& [id, p] : ps_) {
    if (!p.leaving && p.ready && std::find(next.begin(), next.end(), id) == next.end()) next.push_back(id);
  }
  return next;
}

StatusOr<ShardingPlan> Master::PlanServers(const std::vector<int>& members, const std::string& how) {
  if (members.empty()) return Status::Unavailable("no parameter server is left to hold the tables");
  PlannerOptions planner;
  std::optional<ShardingPlan> old_plan;
  std::vector<int> old_members;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int m : members) {
      auto it = ps_.find(m);
      if (it == ps_.end()) return Status::Unavailable(DescribeServer(m) + " left before it could join");
      planner.servers.push_back(ServerInfo{it->second.host, it->second.memory_bytes});
    }
    old_plan = plan_;
    old_members = generation_ps_;
    generation = generation_ + 1;
  }
  if (old_plan) {
    // Servers that stay keep what they can: fewer rows change servers.
    planner.previous = &*old_plan;
    for (int m : members) {
      auto it = std::find(old_members.begin(), old_members.end(), m);
      planner.previous_rank.push_back(it == old_members.end() ? -1 : static_cast<int>(it - old_members.begin()));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(ShardingPlan plan, PlanSharding(job_, planner));
  plan.version = static_cast<uint32_t>(generation);
  std::cout << FormatPlan(job_, plan) << std::flush;
  if (old_plan) {
    const Movement m = Moved(job_, *old_plan, old_members, plan, members);
    const double percent = m.total_elements > 0 ? 100.0 * m.elements / m.total_elements : 0.0;
    std::cout << "[master] plan version " << plan.version << " on " << members.size() << " server(s): " << m.elements
              << " of " << m.total_elements << " row elements (" << static_cast<int>(percent) << "%, "
              << static_cast<int64_t>(m.bytes / 1e6) << " MB with optimizer state) change servers; " << how
              << std::endl;
  }
  return plan;
}

Status Master::StartGeneration(const std::vector<int>& members, const RestorePoint& from,
                               const ShardingPlan* planned) {
  if (members.empty()) return Status::Unavailable("no parameter server is left to hold the tables");
  std::vector<std::string> endpoints;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int m : members) {
      auto it = ps_.find(m);
      if (it == ps_.end()) return Status::Unavailable(DescribeServer(m) + " left before it could join");
      endpoints.push_back(it->second.endpoint);
    }
  }
  std::optional<ShardingPlan> made;
  if (planned == nullptr) {
    const std::string source = from.dir.empty() ? "their initial values (step 0)" : from.dir;
    TESSERA_ASSIGN_OR_RETURN(made, PlanServers(members, from.live ? "servers keep the shards they hold and load the "
                                                                    "others from " + source
                                                                  : "every server loads its rows from " + source));
    planned = &*made;
  }
  const ShardingPlan& plan = *planned;
  const int64_t generation = plan.version;
  const json job_json = job_.ToJson();
  const json plan_json = plan.ToJson();
  // Every server creates (and restores) its shards at once: the pause is
  // the slowest server's, not the sum.
  CreateShardsRequest req;
  req.job = job_json;
  req.plan = plan_json;
  req.trainers = TrainerConnections();
  req.dump_dir = options_.dump_dir;
  req.restore = from.restore;
  // A change at a boundary: what a server keeps need not be reloaded.
  req.keep = from.live;
  req.staged = from.staged;
  std::vector<json> bodies;
  for (size_t rank = 0; rank < members.size(); ++rank) {
    req.rank = static_cast<int>(rank);
    bodies.push_back(req.ToJson());
  }
  // Restoring reads the checkpoint's rows: allow it time.
  const auto replies = AwaitServerCalls(StartServerCalls(members, Opcode::kCreateShards, bodies,
                                                         milliseconds(from.restore.is_null() ? 60000 : 3600000)));
  for (size_t rank = 0; rank < members.size(); ++rank) {
    if (replies[rank].body.ok()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    return replies[rank].body.status().WithContext("creating the shards of plan version " +
                                                   std::to_string(plan.version) + " on " +
                                                   DescribeServer(members[rank]));
  }
  if (from.live && options_.crash_in_migration > 0 && ++migrations_attempted_ == options_.crash_in_migration &&
      options_.crash_hook) {
    LOG(ERROR) << "--test_crash_in_migration " << options_.crash_in_migration << ": dying in this change";
    options_.crash_hook();
  }
  std::vector<StartWaiter> waiters;
  std::vector<int> leaving;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int m : generation_ps_) {
      if (std::find(members.begin(), members.end(), m) == members.end() && ps_.count(m) > 0) leaving.push_back(m);
    }
    generation_ = generation;
    generation_ps_ = members;
    plan_ = plan;
    backups_missing_ = false;
    precopy_.reset();
    precopy_failed_ = false;
    generation_promoted_ = false;
    StartInfo info;
    info.job = job_json;
    info.plan = plan_json;
    info.ps_endpoints = endpoints;
    info.dump_dir = options_.dump_dir;
    info.start_step = from.step;
    info.generation = generation;
    start_info_ = info.ToJson();
    start_state_ = from.trainer_state;
    state_ = State::kRunning;
    waiters.swap(start_waiters_);
    // The clock of liveness restarts: the start may have taken a while.
    const auto now = Clock::now();
    for (auto& [id, p] : ps_) p.last_seen = now;
    for (auto& t : trainers_) {
      if (t) t->last_seen = t->stepped_at = now;
    }
    generations_.push_back({{"generation", generation},
                            {"servers", members.size()},
                            {"start_step", from.step},
                            {"from", from.staged != 0 ? std::string("migration") : from.dir}});
    for (StartWaiter& w : waiters) {
      // A trainer replaced while it waited does not start.
      if (Status member = CheckTrainer(w.trainer); !member.ok()) {
        w.responder.ReplyError(member);
      } else {
        w.responder.Reply(StartReply(w.responder.request_header()));
      }
    }
  }
  // A drained server has handed its rows over (they are on the others now):
  // it may go.
  for (int m : leaving) {
    Status st;
    CallServer(m, Opcode::kShutdown, json::object(), milliseconds(10000), &st);
    std::lock_guard<std::mutex> lock(mu_);
    LOG(INFO) << DescribeServer(m) << " left the job" << (st.ok() ? "" : " (it did not acknowledge: " + st.ToString() + ")");
    ps_.erase(m);
  }
  for (int m : leaving) ps_peers_->Forget(m);
  LOG(INFO) << "generation " << generation << ": " << members.size() << " parameter server(s), from step " << from.step;
  return Status::OK();
}

Status Master::MigrateServers(const std::vector<int>& members, int64_t step, const std::string& trainer_state) {
  const auto start = Clock::now();
  std::optional<Precopy> pre;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pre = std::move(precopy_);
    precopy_.reset();
    precopy_failed_ = false;
  }
  // After a precopy to this very plan, only the rows updated since move.
  int64_t pre_rows = 0, pre_bytes = 0;
  Status precopied = pre ? pre->Outcome(&pre_rows, &pre_bytes) : Status::NotFound("no precopy");
  if (pre && precopied.ok() && pre->members != members) {
    precopied = Status::Aborted("the servers changed since the precopy");
  }
  if (pre && !precopied.ok()) {
    LOG(WARNING) << "the precopy is not used (" << precopied << "): every row that changes servers moves now";
  }
  const bool changed_only = pre && precopied.ok();
  ShardingPlan plan;
  if (changed_only) {
    plan = pre->plan;
  } else {
    TESSERA_ASSIGN_OR_RETURN(plan,
                             PlanServers(members, "the servers that hold them now send them to their new owners"));
  }
  std::vector<int> involved;
  std::vector<json> bodies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TESSERA_RETURN_IF_ERROR(MigrationBodies(plan, members, step,
                                            changed_only ? MigratePhase::kChanged : MigratePhase::kAll, &involved,
                                            &bodies));
  }
  if (changed_only && involved != pre->involved) {
    return Status::Internal("the servers of the precopy and of its boundary differ");
  }
  const auto replies = AwaitServerCalls(StartServerCalls(involved, Opcode::kMigrate, bodies, milliseconds(3600000)));
  int64_t rows = 0, bytes = 0;
  for (size_t i = 0; i < involved.size(); ++i) {
    if (!replies[i].body.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      return replies[i].body.status().WithContext("moving the rows of plan version " + std::to_string(plan.version) +
                                                  " on " + DescribeServer(involved[i]));
    }
    rows += replies[i].body->value("rows", int64_t{0});
    bytes += replies[i].body->value("bytes", int64_t{0});
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "[master] migration at step " << step << ": " << rows << " rows (" << bytes / 1e6
            << " MB) went to their new servers in " << seconds << " s (" << (seconds > 0 ? bytes / 1e6 / seconds : 0)
            << " MB/s)";
  if (changed_only) {
    std::cout << ": the rows updated since the precopy, which copied " << pre_rows << " rows (" << pre_bytes / 1e6
              << " MB) while the job trained";
  }
  std::cout << std::endl;
  {
    std::lock_guard<std::mutex> lock(mu_);
    json stats = {{"step", step}, {"plan_version", plan.version}, {"rows", rows}, {"bytes", bytes},
                  {"seconds", seconds}, {"phase", MigratePhaseName(changed_only ? MigratePhase::kChanged
                                                                                : MigratePhase::kAll)}};
    if (changed_only) {
      stats["precopy"] = {{"rows", pre_rows},
                          {"bytes", pre_bytes},
                          {"seconds", std::chrono::duration<double>(Clock::now() - pre->started).count()}};
    }
    migration_stats_.push_back(std::move(stats));
  }
  RestorePoint from;
  from.step = step;
  from.trainer_state = trainer_state;
  from.live = true;
  from.staged = plan.version;
  return StartGeneration(members, from, &plan);
}

Status Master::EndGenerationForRecovery(const Status& why, std::vector<Responder>* at_barrier) {
  if (recoveries_ >= job_.runtime.max_recoveries) {
    return Status(why.code(), why.message() + "; the job has already recovered " + std::to_string(recoveries_) +
                                  " time(s), its runtime.max_recoveries");
  }
  ++recoveries_;
  // The generation is over: trainers learn it from their next heartbeat,
  // drop the step they are in and wait for the next one.
  state_ = State::kRecovering;
  ++generation_;
  generation_promoted_ = false;
  precopy_.reset();
  *at_barrier = barrier_.TakeAll();
  barrier_state_.clear();
  // Steps of the lost generation that not every trainer reported are never
  // completed: the replayed steps are reported afresh.
  progress_.clear();
  return Status::OK();
}

bool Master::CanPromote(int member) const {
  if (job_.cluster.replicas < 2 || state_ != State::kRunning || !plan_) return false;
  auto rank_of = [&](int m) {
    auto it = std::find(generation_ps_.begin(), generation_ps_.end(), m);
    return it == generation_ps_.end() ? -1 : static_cast<int>(it - generation_ps_.begin());
  };
  const int lost = rank_of(member);
  if (lost < 0 || generation_ps_.size() < 2) return false;
  for (const ShardSpec& s : plan_->shards) {
    if (s.ps != lost) continue;
    if (s.backup_ps < 0 || s.backup_ps >= static_cast<int>(generation_ps_.size())) return false;
    if (ps_.count(generation_ps_[s.backup_ps]) == 0) return false;  // its backup is gone too
  }
  return true;
}

Status Master::PromoteBackups(int member, const Status& why) {
  const auto start = Clock::now();
  std::vector<Responder> at_barrier;
  ShardingPlan plan;
  std::vector<int> members;
  std::vector<std::string> endpoints;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // No barrier is served while the servers change plans; trainers waiting
    // at one arrive again under the new generation.
    state_ = State::kRecovering;
    at_barrier = barrier_.TakeAll();
    barrier_state_.clear();
    ++recoveries_;
    std::vector<int> old_rank_to_new(generation_ps_.size(), -1);
    for (size_t r = 0; r < generation_ps_.size(); ++r) {
      if (generation_ps_[r] == member) continue;
      old_rank_to_new[r] = static_cast<int>(members.size());
      members.push_back(generation_ps_[r]);
      endpoints.push_back(ps_.count(generation_ps_[r]) ? ps_[generation_ps_[r]].endpoint : std::string());
    }
    plan = *plan_;
    plan.version = static_cast<uint32_t>(generation_ + 1);
    plan.num_ps = static_cast<int>(members.size());
    for (ShardSpec& s : plan.shards) {
      const int primary = old_rank_to_new[s.ps];
      const int backup = s.backup_ps >= 0 ? old_rank_to_new[s.backup_ps] : -1;
      s.ps = primary >= 0 ? primary : backup;  // CanPromote: a backup exists
      s.backup_ps = primary >= 0 ? backup : -1;
    }
    ps_.erase(member);  // fenced: its heartbeats are refused from now on
  }
  ps_peers_->Forget(member);
  for (Responder& r : at_barrier) {
    r.ReplyError(Status::Cancelled("a parameter server was lost; its backups take over: arrive again"));
  }
  std::cout << "[master] lost " << why.message() << "; its shards' backups take over (no rollback)" << std::endl;
  std::vector<json> bodies;
  PromoteRequest req;
  req.plan = plan.ToJson();
  req.trainers = TrainerConnections();
  for (size_t rank = 0; rank < members.size(); ++rank) {
    req.rank = static_cast<int>(rank);
    bodies.push_back(req.ToJson());
  }
  const auto replies = AwaitServerCalls(StartServerCalls(members, Opcode::kPromote, bodies, milliseconds(30000)));
  Status st;
  for (size_t rank = 0; rank < members.size() && st.ok(); ++rank) {
    if (replies[rank].body.ok()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    st = replies[rank].body.status().WithContext("promoting backups on " + DescribeServer(members[rank]));
  }
  if (!st.ok()) {
    // A server that refused or died meanwhile: roll back instead, from a
    // consistent cut (CREATE_SHARDS replaces whatever PROMOTE changed).
    std::cout << "[master] promotion failed (" << st.ToString() << "); rolling back instead" << std::endl;
    std::vector<Responder> none;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++generation_;  // trainers drop their step: the rollback replays it
      generation_promoted_ = false;
      progress_.clear();
      none = barrier_.TakeAll();
    }
    for (Responder& r : none) r.ReplyError(Status::Cancelled("the job rolls back"));
    return RollBack("recovering from the lost server after a failed promotion");
  }
  std::vector<StartWaiter> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_ = plan.version;
    generation_ps_ = members;
    plan_ = plan;
    backups_missing_ = true;
    precopy_.reset();  // toward a plan with the lost server's backups: void
    precopy_failed_ = false;
    generation_promoted_ = true;
    StartInfo info;
    auto previous = StartInfo::Parse(start_info_);
    if (previous.ok()) info = *previous;
    info.plan = plan.ToJson();
    info.ps_endpoints = endpoints;
    info.generation = generation_;
    info.promoted = true;
    start_info_ = info.ToJson();
    state_ = State::kRunning;
    waiters.swap(start_waiters_);
    generations_.push_back({{"generation", generation_}, {"servers", members.size()}, {"promoted", true}});
    for (StartWaiter& w : waiters) {
      if (Status m = CheckTrainer(w.trainer); !m.ok()) {
        w.responder.ReplyError(m);
      } else {
        w.responder.Reply(StartReply(w.responder.request_header()));
      }
    }
  }
  std::cout << "[master] promoted: generation " << plan.version << " on " << members.size()
            << " parameter server(s) in " << std::chrono::duration<double>(Clock::now() - start).count()
            << " s; new backups "
            << (job_.runtime.precopy ? "are copied while the job trains, brought up to date at a step boundary"
                                             : "at the next step boundary")
            << std::endl;
  return Status::OK();
}

Status Master::RecoverFromLostServer(int member, const Status& why) {
  bool promote = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    promote = CanPromote(member);
    if (promote && recoveries_ >= job_.runtime.max_recoveries) {
      return Status(why.code(), why.message() + "; the job has already recovered " + std::to_string(recoveries_) +
                                    " time(s), its runtime.max_recoveries");
    }
  }
  if (promote) return PromoteBackups(member, why);
  std::vector<Responder> at_barrier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TESSERA_RETURN_IF_ERROR(EndGenerationForRecovery(why, &at_barrier));
    ps_.erase(member);  // its heartbeats are refused from now on: it is fenced
  }
  ps_peers_->Forget(member);
  for (Responder& r : at_barrier) r.ReplyError(Status::Cancelled("a parameter server was lost; the job rolls back"));
  std::cout << "[master] lost " << why.message() << "; recovering" << std::endl;

  // A replacement may register; with none, the survivors take the rows.
  const auto start = Clock::now();
  const auto wait = milliseconds(job_.runtime.replacement_wait_ms);
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    Status reason;
    if (AbortRequested(&reason)) return reason;
    const size_t next = NextServers().size();
    const bool newcomer = next + 1 > generation_ps_.size();
    const bool any = next > 0;
    const auto waited = Clock::now() - start;
    if (any && (newcomer || waited >= wait)) break;
    if (!any && waited >= std::max<milliseconds>(wait, milliseconds(options_.register_timeout_ms))) {
      return Status(why.code(), why.message() + "; no parameter server is left and none registered within " +
                                    std::to_string(std::max<int64_t>(job_.runtime.replacement_wait_ms,
                                                                     options_.register_timeout_ms)) +
                                    " ms");
    }
    cv_.wait_for(lock, milliseconds(100));
  }
  return RollBack("recovering from the lost server");
}

Status Master::RecoverFromLostTrainer(int rank, const Status& why) {
  std::vector<Responder> at_barrier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TESSERA_RETURN_IF_ERROR(EndGenerationForRecovery(why, &at_barrier));
    // The rank is free for a replacement; the lost trainer's requests carry
    // an incarnation no longer held, so they are refused: it is fenced.
    trainers_[rank].reset();
  }
  for (Responder& r : at_barrier) r.ReplyError(Status::Cancelled("a trainer was lost; the job rolls back"));
  std::cout << "[master] lost " << why.message() << "; waiting up to "
            << job_.runtime.trainer_replacement_wait_ms / 1000.0 << " s for a replacement trainer " << rank
            << " (scripts/run_trainer.sh --rank " << rank << ")" << std::endl;
  // The collective's world is fixed: nothing trains until the rank is back.
  const auto deadline = Clock::now() + milliseconds(job_.runtime.trainer_replacement_wait_ms);
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!trainers_[rank]) {
      Status reason;
      if (AbortRequested(&reason)) return reason;
      if (Clock::now() >= deadline) {
        return Status(why.code(), why.message() + "; no replacement trainer " + std::to_string(rank) +
                                      " registered within runtime.trainer_replacement_wait_ms (" +
                                      std::to_string(job_.runtime.trainer_replacement_wait_ms) + " ms)");
      }
      cv_.wait_for(lock, milliseconds(100));
    }
  }
  return RollBack("recovering from the lost trainer");
}

Status Master::RollBack(const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(RestorePoint from, NewestRestorePoint(/*required=*/false));
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = NextServers();
  }
  std::cout << "[master] rolling back to step " << from.step << " ("
            << (from.dir.empty() ? "no checkpoint: from the start" : from.dir) << ") on " << members.size()
            << " parameter server(s)" << std::endl;
  const auto restore_start = Clock::now();
  TESSERA_RETURN_IF_ERROR(StartGeneration(members, from).WithContext(what));
  const double restore_s = std::chrono::duration<double>(Clock::now() - restore_start).count();
  std::cout << "[master] recovered: generation " << generation_ << " from step " << from.step << " ("
            << restore_s << " s to restore)" << std::endl;
  return Status::OK();
}

}  // namespace tessera
