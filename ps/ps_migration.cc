// The parameter server's side of a migration: when the job's servers change
// at a step boundary, each server fetches the rows of the shards the new plan
// gives it from the servers that hold them now, straight from their stores
// (every tier, optimizer state included), and serves its own to the others.
// Nothing served changes until the master's CREATE_SHARDS {staged} swaps the
// staged shards in, so a migration that fails leaves the running plan whole.
#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include <glog/logging.h>
#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/messages.h"
#include "ps/page_memory.h"
#include "ps/ps_service.h"
#include "ps/row_layout.h"
#include "ps/shard_parallel.h"
#include "ps/shard_rows.h"

namespace tessera {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// A source that was not yet told of the migration (its MIGRATE is still in
// flight) refuses (PERMISSION_DENIED, or FAILED_PRECONDITION while it has
// an older one); it is asked again for this long.
constexpr milliseconds kSourceWait{30000};

// One FETCH_ROWS may take this long: a scan of a large RocksDB shard.
constexpr milliseconds kFetchTimeout{120000};

}  // namespace

void PsService::EndMigration() {
  std::lock_guard<std::mutex> guard(migration_mu_);
  migration_cancel_ = true;
  if (migration_thread_.joinable()) migration_thread_.join();
  migration_cancel_ = false;
  std::shared_ptr<const ShardMap> shards;
  {
    std::lock_guard<std::mutex> lock(mu_);
    migration_.reset();  // what it staged is dropped (its files removed)
    shards = shards_;
  }
  // A precopy's sources stop remembering updated rows.
  for (const auto& [id, shard] : *shards) shard->TrackChanges(false);
  ReturnFreedHeapMemory();  // what the migration staged or remembered
  if (end_server_calls_) end_server_calls_();  // its fetches ended with its thread
}

void PsService::Migrate(const MigrateRequest& req, std::function<void(StatusOr<json>)> done) {
  auto job = ParseJobConfigJson(req.job, "");
  if (!job.ok()) return done(job.status().WithContext("MIGRATE job config"));
  auto plan = ShardingPlan::FromJson(req.plan);
  if (!plan.ok()) return done(plan.status().WithContext("MIGRATE plan"));
  auto from = ShardingPlan::FromJson(req.from_plan);
  if (!from.ok()) return done(from.status().WithContext("MIGRATE from_plan"));
  if (req.rank >= plan->num_ps) {
    return done(Status::InvalidArgument("MIGRATE: rank " + std::to_string(req.rank) + " is not in a plan of " +
                                        std::to_string(plan->num_ps) + " servers"));
  }
  if (plan->version <= from->version || from->version != req.from_version) {
    return done(Status::InvalidArgument("MIGRATE: from plan version " + std::to_string(from->version) + " to " +
                                        std::to_string(plan->version) + " (from_version " +
                                        std::to_string(req.from_version) + ")"));
  }
  if (req.sources.size() != static_cast<size_t>(from->num_ps)) {
    return done(Status::InvalidArgument("MIGRATE: " + std::to_string(req.sources.size()) +
                                        " source endpoints for a plan of " + std::to_string(from->num_ps) +
                                        " servers"));
  }
  // A server that leaves (rank -1) holds nothing of the new plan.
  const std::vector<ShardSpec> mine = req.rank >= 0 ? plan->HeldBy(req.rank) : std::vector<ShardSpec>{};
  for (const ShardSpec& spec : mine) {
    if (spec.table < 0 || spec.table >= static_cast<int>(job->tables.size())) {
      return done(Status::InvalidArgument("MIGRATE: plan names table " + std::to_string(spec.table) +
                                          " which the job lacks"));
    }
  }
  if (req.phase == MigratePhase::kChanged) return MigrateChanged(req, *job, *plan, *from, mine, std::move(done));
  bool stale = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A server of the running plan serves it; a new one holds nothing yet.
    // One that holds an older plan's shards came back from a generation the
    // job has left (it registered again after its master was replaced):
    // those rows are not current, and it joins as a new server.
    if (job_ && plan_version_ > from->version) {
      return done(Status::FailedPrecondition("MIGRATE from plan version " + std::to_string(from->version) +
                                             ": this server follows version " + std::to_string(plan_version_)));
    }
    stale = job_.has_value() && plan_version_ < from->version;
  }
  EndMigration();
  if (stale) {
    std::lock_guard<std::mutex> lock(mu_);
    LOG(WARNING) << "ps " << ps_rank_.load() << ": dropping the shards of plan version " << plan_version_
                 << ", which the job has left; joining plan version " << plan->version << " as a new server";
    shards_ = std::make_shared<ShardMap>();
    job_.reset();
    backups_.clear();
    contexts_.clear();
    pushing_.clear();
  }
  std::vector<ShardSpec> stage;
  if (req.phase == MigratePhase::kPrecopy) {
    // Before any FETCH_ROWS is served (they are refused until migration_
    // is set below): every update from here on is remembered, so that the
    // rows copied while the job trains can be made current later.
    for (const auto& [id, shard] : *Shards()) shard->TrackChanges(true);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::map<uint32_t, uint32_t> kept = MatchKept(*shards_, mine);
    for (const ShardSpec& spec : mine) {
      if (kept.count(spec.shard_id) == 0) stage.push_back(spec);
    }
    Migration m;
    m.phase = req.phase;
    m.from_version = from->version;
    m.to_version = plan->version;
    m.step = req.step;
    m.fetchers = req.fetchers;
    migration_ = std::move(m);
  }
  StartFetching(req, *job, *plan, *from, mine, std::move(stage), ShardMap{}, std::move(done));
}

void PsService::MigrateChanged(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& to,
                               const ShardingPlan& from, const std::vector<ShardSpec>& mine,
                               std::function<void(StatusOr<json>)> done) {
  std::vector<ShardSpec> stage;
  ShardMap staged;
  std::lock_guard<std::mutex> guard(migration_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only on top of a precopy to this very plan that finished well; the
    // job has trained since, so its copies are made current now.
    if (!migration_ || migration_->phase != MigratePhase::kPrecopy || !migration_->finished ||
        !migration_->status.ok() || migration_->to_version != to.version ||
        migration_->from_version != from.version || (job_ && plan_version_ != from.version)) {
      return done(Status::FailedPrecondition("MIGRATE {phase: changed} to plan version " +
                                             std::to_string(to.version) +
                                             ": no finished precopy to that plan on this server"));
    }
    for (const ShardSpec& spec : mine) {
      if (auto it = migration_->staged.find(spec.shard_id); it != migration_->staged.end()) {
        stage.push_back(spec);
        staged[spec.shard_id] = it->second;
      }
    }
    migration_->phase = MigratePhase::kChanged;
    migration_->step = req.step;
    migration_->fetchers = req.fetchers;
    migration_->finished = false;
    migration_->fetch_ids.clear();
  }
  // The precopy's thread has ended (it was finished).
  if (migration_thread_.joinable()) migration_thread_.join();
  StartFetchingLocked(req, job, to, from, mine, std::move(stage), std::move(staged), std::move(done));
}

void PsService::StartFetching(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& plan,
                              const ShardingPlan& from, const std::vector<ShardSpec>& mine,
                              std::vector<ShardSpec> stage, ShardMap staged,
                              std::function<void(StatusOr<json>)> done) {
  std::lock_guard<std::mutex> guard(migration_mu_);
  StartFetchingLocked(req, job, plan, from, mine, std::move(stage), std::move(staged), std::move(done));
}

void PsService::StartFetchingLocked(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& plan,
                                    const ShardingPlan& from, const std::vector<ShardSpec>& mine,
                                    std::vector<ShardSpec> stage, ShardMap staged,
                                    std::function<void(StatusOr<json>)> done) {
  migration_thread_ = std::thread([this, req, job, plan, from, mine, stage = std::move(stage),
                                   staged = std::move(staged), done = std::move(done)]() {
    const auto start = Clock::now();
    // Files of a staged store are named apart from the running plan's.
    const std::string instance = "v" + std::to_string(plan.version);
    std::vector<std::shared_ptr<EmbeddingShard>> shards(stage.size());
    std::vector<int64_t> rows(stage.size(), 0), bytes(stage.size(), 0);
    Status st = ForEachShardInParallel(stage.size(), [&](size_t i) -> Status {
      if (auto it = staged.find(stage[i].shard_id); it != staged.end()) {
        shards[i] = it->second;  // a precopy's: only the changed rows come again
      } else {
        TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingShard> shard, NewShard(job, mine, stage[i], instance));
        shards[i] = std::move(shard);
      }
      return FetchShard(req, from, shards[i].get(), &rows[i], &bytes[i])
          .WithContext("staging shard " + std::to_string(stage[i].shard_id) + " of plan version " +
                       std::to_string(plan.version));
    });
    int64_t total_rows = 0, total_bytes = 0;
    for (size_t i = 0; i < stage.size(); ++i) {
      total_rows += rows[i];
      total_bytes += bytes[i];
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (migration_ && migration_->to_version == plan.version) {
        migration_->finished = true;
        migration_->status = st;
        if (st.ok()) {
          for (size_t i = 0; i < stage.size(); ++i) migration_->staged[stage[i].shard_id] = std::move(shards[i]);
        }
      }
    }
    const std::string what = std::string(" (") + MigratePhaseName(req.phase) + ")";
    if (!st.ok()) {
      LOG(ERROR) << "ps " << ps_rank_.load() << ": migration to plan version " << plan.version << what
                 << " failed: " << st;
      done(st);
      return;
    }
    LOG(INFO) << "ps " << ps_rank_.load() << ": migration to plan version " << plan.version << what << ": staged "
              << stage.size() << " shard(s), " << total_rows << " rows (" << total_bytes << " bytes) fetched in "
              << seconds << " s";
    done(json{{"shards", stage.size()}, {"rows", total_rows}, {"bytes", total_bytes}, {"seconds", seconds}});
  });
}

Status PsService::FetchShard(const MigrateRequest& req, const ShardingPlan& from, EmbeddingShard* shard,
                             int64_t* rows_fetched, int64_t* bytes_fetched) {
  if (!call_server_) return Status::FailedPrecondition("this server cannot fetch rows from others");
  const ShardSpec& mine = shard->spec();
  const RowLayout layout = RowLayout::For(shard->table().optimizer.type);
  for (const ShardSpec& old : from.shards) {
    // From the primary: a backup equals it.
    if (old.table != mine.table) continue;
    const int64_t lo = std::max(mine.row_offset, old.row_offset);
    const int64_t hi = std::min(mine.row_offset + mine.num_rows, old.row_offset + old.num_rows);
    if (lo >= hi || old.col_offset >= mine.col_offset + mine.num_cols ||
        old.col_offset + old.num_cols <= mine.col_offset) {
      continue;
    }
    if (old.ps < 0 || old.ps >= static_cast<int>(req.sources.size())) {
      return Status::InvalidArgument("old shard " + std::to_string(old.shard_id) + " on server rank " +
                                     std::to_string(old.ps) + ", which MIGRATE names no endpoint for");
    }
    const std::string& source = req.sources[old.ps];
    const int width = layout.Width(old.num_cols);
    FetchRowsRequest q;
    q.version = from.version;
    q.shard = old.shard_id;
    q.row_begin = lo;
    q.row_end = hi;
    q.max_rows = std::max<int64_t>(1, fetch_reply_bytes_ / (width * static_cast<int64_t>(sizeof(float))));
    q.changed = req.phase == MigratePhase::kChanged;
    const auto asked_from = Clock::now();
    for (;;) {
      if (migration_cancel_) return Status::Cancelled("the migration was cancelled");
      StatusOr<Message> reply = call_server_(source, EncodeJson(Opcode::kFetchRows, q.ToJson()), kFetchTimeout,
                                             &migration_cancel_);
      const Status answered = reply.ok() ? StatusFromReply(*reply) : reply.status();
      const bool not_told_yet = answered.code() == StatusCode::kFailedPrecondition ||
                                answered.code() == StatusCode::kPermissionDenied;
      if (not_told_yet && Clock::now() - asked_from < kSourceWait) {
        // Not told of the migration yet: its MIGRATE is on the way.
        std::this_thread::sleep_for(milliseconds(20));
        continue;
      }
      if (!answered.ok()) return answered.WithContext("FETCH_ROWS from " + source);
      TESSERA_ASSIGN_OR_RETURN(FetchRowsReply got, DecodeFetchRowsReply(std::move(reply).value()));
      if (static_cast<int>(got.meta.width) != width) {
        return Status::DataLoss("FETCH_ROWS from " + source + ": rows of width " + std::to_string(got.meta.width) +
                                ", expected " + std::to_string(width) + " for shard " + std::to_string(old.shard_id));
      }
      for (size_t i = 0; i < got.ids.size(); ++i) {
        if (got.ids[i] < lo || got.ids[i] >= hi || got.ids[i] <= q.after) {
          return Status::DataLoss("FETCH_ROWS from " + source + ": row " + std::to_string(got.ids[i]) +
                                  " outside the range asked for");
        }
      }
      TESSERA_RETURN_IF_ERROR(MergeRows(shard, got.ids.span(), got.rows.data(), width, old.col_offset, old.num_cols));
      *rows_fetched += static_cast<int64_t>(got.ids.size());
      *bytes_fetched += static_cast<int64_t>(got.rows.size() * sizeof(float) + got.ids.size() * sizeof(int64_t));
      if (got.meta.next < 0) break;
      q.after = got.meta.next;
    }
  }
  return Status::OK();
}

void PsService::HandleFetchRows(Message&& m, Responder r) {
  auto body = DecodeJson(m);
  auto req = body.ok() ? FetchRowsRequest::Parse(*body) : StatusOr<FetchRowsRequest>(body.status());
  if (!req.ok()) {
    ++errors_;
    return r.ReplyError(req.status());
  }
  if (r.peer_role() != Role::kNone && r.peer_role() != Role::kPs) {
    ++errors_;
    return r.ReplyError(Status::PermissionDenied(std::string("FETCH_ROWS from a connection with the ") +
                                                 RoleName(r.peer_role()) +
                                                 " key: only parameter servers fetch rows"));
  }
  std::shared_ptr<EmbeddingShard> shard;
  std::shared_ptr<const std::vector<int64_t>> sorted;  // of the range, once scanned
  const auto range = std::make_tuple(static_cast<uint32_t>(req->shard), req->row_begin, req->row_end, req->changed);
  int64_t step = 0;
  bool at_boundary = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only the servers a migration names may fetch, and only during it.
    // A server's fetch that overtook this server's MIGRATE is refused too;
    // the fetcher asks again for a while.
    if (!migration_) {
      ++errors_;
      return r.ReplyError(Status::PermissionDenied("FETCH_ROWS: no migration runs on this server: refused"));
    }
    const std::vector<std::string>& fetchers = migration_->fetchers;
    if (!open_to_any_sender_ && std::find(fetchers.begin(), fetchers.end(), r.routing_id()) == fetchers.end()) {
      ++errors_;
      return r.ReplyError(Status::PermissionDenied("FETCH_ROWS from a connection that is not a server of the "
                                                   "migration: refused"));
    }
    if (migration_->from_version != req->version || plan_version_ != req->version) {
      ++errors_;
      return r.ReplyError(Status::FailedPrecondition("FETCH_ROWS of plan version " + std::to_string(req->version) +
                                                     ": the migration on this server is from version " +
                                                     std::to_string(migration_->from_version)));
    }
    auto it = shards_->find(static_cast<uint32_t>(req->shard));
    if (it == shards_->end()) {
      ++errors_;
      return r.ReplyError(Status::NotFound("FETCH_ROWS: no shard " + std::to_string(req->shard) + " on this server"));
    }
    if (req->changed && migration_->phase != MigratePhase::kChanged) {
      ++errors_;
      return r.ReplyError(Status::FailedPrecondition("FETCH_ROWS {changed}: no migration of changed rows runs on "
                                                     "this server"));
    }
    shard = it->second;
    step = migration_->step;
    at_boundary = migration_->phase != MigratePhase::kPrecopy;
    if (auto cached = migration_->fetch_ids.find(range); cached != migration_->fetch_ids.end()) {
      sorted = cached->second;
    }
  }
  const ShardSpec& spec = shard->spec();
  if (req->row_begin < spec.row_offset || req->row_end > spec.row_offset + spec.num_rows) {
    ++errors_;
    return r.ReplyError(Status::OutOfRange("FETCH_ROWS: rows [" + std::to_string(req->row_begin) + ", " +
                                           std::to_string(req->row_end) + ") are not all in shard " +
                                           std::to_string(req->shard) + " (rows [" +
                                           std::to_string(spec.row_offset) + ", " +
                                           std::to_string(spec.row_offset + spec.num_rows) + "))"));
  }
  // Sync mode: the boundary's last push may still be being applied. (A
  // precopy copies while the job trains: what changes meanwhile comes again.)
  if (at_boundary) {
    if (Status applied = gate_.WaitApplied(static_cast<uint64_t>(step), std::chrono::minutes(1)); !applied.ok()) {
      return r.ReplyError(applied.WithContext("FETCH_ROWS"));
    }
  }
  RowStore* store = shard->store();
  const int width = store->row_width();
  // Pages of fetch_reply_bytes at most: small enough to stay far under the
  // frame limit and keep this server's reply buffer modest.
  const int64_t cap = std::min<int64_t>(req->max_rows, std::max<int64_t>(1, fetch_reply_bytes_ / (width * 4)));
  if (sorted == nullptr && req->changed) {
    if (!shard->tracking_changes()) {
      return r.ReplyError(Status::FailedPrecondition("FETCH_ROWS {changed}: shard " + std::to_string(req->shard) +
                                                     " has not remembered its updates since a precopy"));
    }
    sorted = std::make_shared<const std::vector<int64_t>>(shard->ChangedIds(req->row_begin, req->row_end));
    std::lock_guard<std::mutex> lock(mu_);
    if (migration_ && migration_->from_version == req->version) migration_->fetch_ids[range] = sorted;
  } else if (sorted == nullptr) {
    // The first page of a range scans the shard (for a RocksDB-backed one,
    // its whole database) once; the later pages reuse what it found.
    auto found = std::make_shared<std::vector<int64_t>>();
    Status scanned = store->ForEach([&](int64_t id, const float*) {
      if (id >= req->row_begin && id < req->row_end) found->push_back(id);
      return Status::OK();
    });
    if (!scanned.ok()) return r.ReplyError(scanned.WithContext("FETCH_ROWS"));
    std::sort(found->begin(), found->end());
    sorted = std::move(found);
    std::lock_guard<std::mutex> lock(mu_);
    if (migration_ && migration_->from_version == req->version) migration_->fetch_ids[range] = sorted;
  }
  const auto first = std::upper_bound(sorted->begin(), sorted->end(), req->after);
  const int64_t left = sorted->end() - first;
  std::vector<int64_t> ids(first, first + std::min(left, cap));
  FetchMeta meta;
  meta.width = static_cast<uint32_t>(width);
  if (left > cap) meta.next = ids.back();
  std::vector<float> rows(ids.size() * static_cast<size_t>(width));
  Status read = store->Read(ids, [&](const float* const* src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) std::copy(src[i], src[i] + width, &rows[static_cast<size_t>(i) * width]);
  });
  if (!read.ok()) return r.ReplyError(read.WithContext("FETCH_ROWS"));
  r.Reply(EncodeFetchRowsReply(r.request_header(), meta, std::move(ids), std::move(rows)));
}

}  // namespace tessera
