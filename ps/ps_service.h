// PsService: the parameter server's request handlers (DESIGN.md §4–5).
//
// A lookup (trainer, step) gathers and pools rows of the shards it names and
// opens a backward context; the push of the same (trainer, step) turns the
// output gradients into row gradients with the ids the context remembered and
// applies the sparse optimizer.
//
// Each handler decodes, asks the step gate (ps/step_gate.h) what the
// consistency rules allow, computes and replies.
//
// Consistency:
//   sync   The server applies step t's gradients of all trainers, summed in
//          rank order, before it serves any step t+1 lookup (those wait).
//          Training then equals single-process training on the concatenated
//          batch. Every trainer sends one lookup and one push per server per
//          step, empty when it has nothing for this server.
//   async  Each push is applied on arrival; lookups never wait (Hogwild).
//
// Exactly once: a push carries (trainer, step); one at or below the last
// step applied for that trainer is answered ALREADY_APPLIED and not applied.
// Bad input (unknown shard, id outside the shard, NaN gradient, shapes that
// disagree with the context) is answered with an error and changes nothing.
//
// Who may ask (docs/design.md, "Who may say what"): control requests only
// the master's connection (learned at registration, set_master), lookups and
// pushes for trainer r only trainer r's connection in the current plan (sent
// with CREATE_SHARDS and PROMOTE). With the job's keys, the connection must
// also hold the master's or a trainer's key. Anything else is refused
// PERMISSION_DENIED and changes nothing.
//
// Thread safety: all methods may be called from any thread concurrently.
// Locks: mu_ before the gate's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/messages.h"
#include "common/rpc_server.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "ps/embedding_shard.h"
#include "ps/step_gate.h"

namespace tessera {

struct PsServiceOptions {
  // This server's rank among the job's parameter servers.
  int ps_rank = 0;
  // Makes each shard's row store; null keeps rows in memory.
  RowStoreFactory store_factory;
  // Whether a shard's store keeps files named by its id (RocksDB): such a
  // shard is kept across plans only under the same id.
  bool stores_named_by_id = false;
  // Fault injection for tests: called with each control request's opcode
  // before it is handled (main() may end the process there).
  std::function<void(Opcode)> before_control;
  // Serve any connection, as if it were the master or any trainer. For
  // tests that drive the service without a master; a server of a job never.
  bool open_to_any_sender = false;
  // Values one lookup reply may hold (1 GiB of floats): a request that asks
  // for more is refused RESOURCE_EXHAUSTED before anything is allocated.
  size_t max_reply_values = size_t{1} << 28;
  // Sends a request to the parameter server at `endpoint` (FETCH_ROWS in a
  // migration) and waits for its reply, until `timeout` or *cancel; ends
  // early when that server's connection is lost. Null: this server cannot
  // fetch rows, and a migration that needs some fails.
  using CallServerFn = std::function<StatusOr<Message>(const std::string& endpoint, Message&& request,
                                                       std::chrono::milliseconds timeout,
                                                       const std::atomic<bool>* cancel)>;
  CallServerFn call_server;
  // Called when no migration is in flight any more (its rows swapped in, or
  // it was dropped): call_server may close the connections it opened. A
  // server that died or left would otherwise keep its socket, its monitor
  // and ZeroMQ's reconnect attempts in this process for good, one more per
  // server change (the soak's +3 descriptors per lost server); the next
  // migration connects again, which costs a handshake per source.
  std::function<void()> end_server_calls;
  // Runs a task on another of the server's worker threads (RpcServer::Post).
  // A sync step's last push releases every trainer's lookup of the next
  // step at once (with prefetch, all of them wait there); they are served
  // side by side rather than one after another on the pushing thread, while
  // the other workers idle. Null: served on the calling thread.
  std::function<void(std::function<void()>)> run_on_worker;
  // Called once when a shard's store reports that rows it holds are damaged
  // (DATA_LOSS: a checksum mismatch in the RocksDB tier, a malformed row).
  // Such a server cannot serve its shards any more: it refuses every later
  // lookup and push with UNAVAILABLE, which trainers retry while the job's
  // servers change, and the owner stops it, so that the master counts it
  // lost and rolls the job back to its newest checkpoint (which shares no
  // file with the live rows: ps/detached_checkpoint.h). Null: DATA_LOSS is
  // the request's answer like any other error.
  std::function<void(const Status&)> storage_lost;
  // Fault injection for tests: the Nth lookup (from 1) finds its rows
  // damaged, as a store's checksum mismatch would report it. 0: never.
  int64_t test_data_loss_at_lookup = 0;
  // Bytes of rows one FETCH_ROWS reply carries at most (the pages a
  // migration moves a shard in).
  int64_t fetch_reply_bytes = int64_t{32} << 20;
};

class PsService {
 public:
  explicit PsService(PsServiceOptions options);
  ~PsService();

  // Entry point for RpcServer: dispatches on the opcode.
  void Handle(Message&& request, Responder responder);

  // Creates the shards the plan places on this server, for this job. Replaces
  // any earlier job's shards; lookups still waiting under the earlier plan
  // are answered PLAN_CHANGED. With `restore` (a checkpoint's shards, see
  // master/master_checkpoint.cc), fills them with the checkpoint's rows —
  // whichever old shards hold them, however the old plan cut the tables —
  // and starts at its step.
  // With `keep` (the restore point is this server's live state: a
  // checkpoint just taken at this step boundary), a shard it holds already
  // (same id, table, rows and columns) stays as it is, not reloaded.
  // With `staged` (the version of a migration's plan, see Migrate), the
  // shards it does not keep are those the migration staged: nothing loads.
  Status CreateShards(const JobConfig& job, const ShardingPlan& plan, const nlohmann::json& restore = {},
                      bool keep = false, uint32_t staged = 0);

  // A migration to `req.plan` (common/control_messages.h: MIGRATE): stages
  // the shards the new plan gives this server that it does not hold (as
  // CreateShards with keep would keep them) by fetching their rows from the
  // servers of the running plan, and meanwhile serves FETCH_ROWS of its own
  // shards to req.fetchers. Runs on its own thread; `done` is called once,
  // with the rows and bytes fetched, or the error. A later Migrate or
  // CreateShards cancels one that still runs and drops what it staged.
  // Phases (MigratePhase): a precopy runs while the job trains and has this
  // server, as a source, remember the rows it updates from then on; a
  // `changed` migration after it, at a boundary, fetches only those again
  // into what the precopy staged.
  void Migrate(const MigrateRequest& req, std::function<void(StatusOr<nlohmann::json>)> done);
  // Cancels and joins a migration that runs, and drops what one staged.
  // Before the service's call_server goes away.
  void EndMigration();

  // A server of the plan was lost and the backups of its shards take over
  // (`plan` differs from the running one only in who serves and who backs
  // up): this server, at `rank` now, keeps its shards as they are — rows,
  // backward contexts, applied steps — and follows `plan`. Shards it no
  // longer holds are dropped. Fails, changing nothing, when `plan` asks for
  // a shard it does not hold.
  Status Promote(const ShardingPlan& plan, int rank);

  // Snapshots every shard under dir/shard<id> once the gradients of all
  // steps before `step` are applied (checkpoint at that step boundary).
  StatusOr<nlohmann::json> Snapshot(const std::string& dir, int64_t step);

  // Fails waiting and future requests with `reason` (the master ends the job).
  void Abort(const Status& reason);

  // Writes each shard's materialized rows to dir/shard<id>.params.
  StatusOr<std::vector<std::string>> DumpShards(const std::string& dir);

  nlohmann::json Stats() const;

  // The rank is assigned by the master at registration.
  void set_rank(int rank);
  // The master's connection (RpcClient::routing_id() of its client), given
  // in the registration reply; until then no control request is obeyed.
  void set_master(std::string routing_id);
  // The version of the plan the shards follow (0: none yet).
  uint32_t plan_version() const;

  // Blocks until a SHUTDOWN request arrived or the deadline passed; true if shut down.
  bool WaitForShutdown(std::chrono::milliseconds timeout);
  bool shutdown_requested() const;

 private:
  struct Context {
    std::vector<ForwardContextEntry> entries;
    std::chrono::steady_clock::time_point created;
  };
  // Row gradients of one push, per request entry.
  struct EntryGrads {
    uint32_t shard = 0;
    std::vector<int64_t> ids;
    // [ids x cols]. Not zeroed when made: the backward writes every value,
    // and zeroing them took about 2% of a W2 sync server's samples.
    std::unique_ptr<float[]> grads;
    // The rows of ids as the lookup found them, when its store keeps rows
    // in place (ForwardContextEntry::row_ptrs), and that store.
    std::vector<float*> rows;
    const RowStore* row_store = nullptr;
  };
  using ShardMap = std::unordered_map<uint32_t, std::shared_ptr<EmbeddingShard>>;
  struct DeferredLookup {
    LookupRequest request;
    Responder responder;
  };
  using Gate = StepGate<std::vector<EntryGrads>, DeferredLookup>;

  void HandleLookup(Message&& m, Responder r);
  void HandlePush(Message&& m, Responder r);
  void HandleControl(Message&& m, Responder r);
  // PERMISSION_DENIED unless `r` is the master's connection.
  Status CheckMaster(const Responder& r) const;
  // PERMISSION_DENIED unless `r` is trainer `trainer`'s connection in the
  // current plan. REQUIRES: mu_ held.
  Status CheckTrainerLocked(uint32_t trainer, const Responder& r) const;
  // Whether SNAPSHOT (dir, step) and DUMP_SHARDS (dir) ask for what this
  // server knows the job may ask: a snapshot under the job's checkpoint.dir
  // at a step the trainers can have reached, a dump into the --dump_dir the
  // master was started with (sent with CREATE_SHARDS). Not a place or a
  // step a stranger chose.
  Status CheckSnapshotRequest(const std::string& dir, int64_t step) const;
  Status CheckDumpRequest(const std::string& dir) const;
  // The trainers' connections a plan's CREATE_SHARDS or PROMOTE carries,
  // taken once the plan is in place.
  void set_trainers(std::vector<std::string> routing_ids);

  // A migration (ps/ps_migration.cc).
  struct Migration {
    MigratePhase phase = MigratePhase::kAll;
    uint32_t from_version = 0, to_version = 0;
    int64_t step = 0;
    std::vector<std::string> fetchers;  // routing ids
    bool finished = false;
    Status status;    // once finished
    ShardMap staged;  // once finished OK
    // The ids, sorted, of each (shard, row_begin, row_end) a fetcher pages
    // through: one scan of the shard's rows serves all its pages (its rows
    // do not change while the migration runs: training waits for it).
    // Keyed also by `changed` (the rows updated since the precopy only).
    std::map<std::tuple<uint32_t, int64_t, int64_t, bool>, std::shared_ptr<const std::vector<int64_t>>> fetch_ids;
  };
  // MIGRATE {phase: changed}: fetches again, into the shards a precopy to
  // the same plan staged, the rows their sources updated since.
  void MigrateChanged(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& to,
                      const ShardingPlan& from, const std::vector<ShardSpec>& mine,
                      std::function<void(StatusOr<nlohmann::json>)> done);
  // Runs the fetches of a migration into `stage` on the migration thread,
  // then marks the migration finished and calls done.
  void StartFetching(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& plan,
                     const ShardingPlan& from, const std::vector<ShardSpec>& mine, std::vector<ShardSpec> stage,
                     ShardMap staged, std::function<void(StatusOr<nlohmann::json>)> done);
  void StartFetchingLocked(const MigrateRequest& req, const JobConfig& job, const ShardingPlan& plan,
                           const ShardingPlan& from, const std::vector<ShardSpec>& mine,
                           std::vector<ShardSpec> stage, ShardMap staged,
                           std::function<void(StatusOr<nlohmann::json>)> done);  // REQUIRES: migration_mu_ held
  // Serves FETCH_ROWS: rows of a shard of the running plan to a server
  // of the migration.
  void HandleFetchRows(Message&& m, Responder r);
  // Fills one staged shard from the running plan's servers.
  Status FetchShard(const MigrateRequest& req, const ShardingPlan& from, EmbeddingShard* shard, int64_t* rows,
                    int64_t* bytes);
  // Which shards of `next` (new id -> old id) the held ones `old` are: the
  // same table, rows and columns (and id, for stores with files named by
  // id). CreateShards keeps these; a migration stages the others.
  std::map<uint32_t, uint32_t> MatchKept(const ShardMap& old, const std::vector<ShardSpec>& next) const;
  // Creates the empty shard `spec` of the ones `mine` this server will hold.
  StatusOr<std::unique_ptr<EmbeddingShard>> NewShard(const JobConfig& job, const std::vector<ShardSpec>& mine,
                                                     const ShardSpec& spec, const std::string& store_instance) const;

  // Computes and answers a lookup; stores its context on success.
  void ServeLookup(LookupRequest&& req, Responder r);
  // The ids of a parked lookup's entries on shards with a slower tier, and
  // the shard map that keeps those shards alive until they are warmed.
  struct WarmList {
    std::shared_ptr<const ShardMap> shards;
    std::vector<std::pair<EmbeddingShard*, std::vector<int64_t>>> entries;
  };
  WarmList WarmableRowsLocked(const LookupRequest& req) const;  // REQUIRES: mu_ held
  // Brings the rows up on a worker thread (EmbeddingShard::Warm).
  void WarmRows(WarmList&& warm);
  // Serves the lookups the gate released, or answers them with its status.
  void AnswerReleased(Gate::Released&& released);
  // Checks a push against its context and computes row gradients.
  Status PushToRowGrads(const PushRequest& push, const Context& ctx, std::vector<EntryGrads>* out);
  // Sums the row gradients of several pushes (in the order given) per shard
  // and applies the optimizer once per shard.
  Status ApplyMerged(const std::vector<const std::vector<EntryGrads>*>& pushes);
  // `st`, or where it says the store's rows are damaged (and storage_lost
  // is set), the UNAVAILABLE every request gets from now on: the first
  // such error aborts the service and calls storage_lost.
  Status StorageFailure(const Status& st);
  // Drops the contexts older than the job's context_ttl_ms; the lookups
  // that waited for their push go to *released. REQUIRES: mu_ held.
  void ExpireContexts(Gate::Released* released);
  // Moves the lookups `from` hands back to serve into *to.
  static void AppendReleased(Gate::Released&& from, Gate::Released* to);
  // The current shards; requests hold the snapshot they started with.
  std::shared_ptr<const ShardMap> Shards() const;

  std::atomic<int> ps_rank_;
  const RowStoreFactory store_factory_;
  const std::function<void(Opcode)> before_control_;
  const bool stores_named_by_id_;
  const PsServiceOptions::CallServerFn call_server_;
  const std::function<void()> end_server_calls_;
  const std::function<void(std::function<void()>)> run_on_worker_;
  const int64_t fetch_reply_bytes_;
  const std::function<void(const Status&)> storage_lost_;
  const int64_t test_data_loss_at_lookup_;
  std::atomic<int64_t> lookups_started_{0};
  std::atomic<bool> lost_storage_{false};
  // Drops the current shards once no request uses them (CreateShards), but
  // those of `keep` that are the same shard, which go to *kept.
  Status ReleaseShards(const std::vector<ShardSpec>& keep, ShardMap* kept);
  // Fills new shards from a checkpoint's (CreateShards), several at once.
  Status Restore(const nlohmann::json& restore, const ShardMap& shards);
  Status RestoreShard(const nlohmann::json& restore, uint32_t id, EmbeddingShard* shard);

  mutable std::mutex mu_;
  std::condition_variable shutdown_cv_;
  std::shared_ptr<const ShardMap> shards_;                                 // GUARDED_BY(mu_)
  std::optional<JobConfig> job_;                                          // GUARDED_BY(mu_)
  uint32_t plan_version_ = 0;                                             // GUARDED_BY(mu_)
  std::set<uint32_t> backups_;  // GUARDED_BY(mu_): shards held as another server's backup
  const bool open_to_any_sender_;
  std::string master_;                 // GUARDED_BY(mu_): its connection's routing id
  std::vector<std::string> trainers_;  // GUARDED_BY(mu_): by rank, each one's routing id
  std::string dump_dir_;               // GUARDED_BY(mu_): the job's --dump_dir ("" none)
  // Backward contexts one trainer may hold open at once (lookups whose push
  // has not come); more are refused.
  static constexpr size_t kMaxContextsPerTrainer = 64;
  const size_t max_reply_values_;
  // Drops `trainer`'s contexts far behind `step`; RESOURCE_EXHAUSTED when it
  // still holds the most it may and `step` would be a new one.
  // Lookups that waited for a dropped context's push go to *released.
  Status BoundContextsLocked(uint32_t trainer, uint64_t step, Gate::Released* released);  // REQUIRES: mu_ held
  std::map<std::pair<uint32_t, uint64_t>, Context> contexts_;             // GUARDED_BY(mu_)
  // Async: the (trainer, step) pushes taken out of contexts_ and not yet
  // applied or refused; the trainer's lookup of the next step waits for them.
  std::set<std::pair<uint32_t, uint64_t>> pushing_;  // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point last_expiry_;                     // GUARDED_BY(mu_)
  bool shutdown_ = false;                                                 // GUARDED_BY(mu_)
  std::optional<Migration> migration_;                                    // GUARDED_BY(mu_)
  std::thread migration_thread_;        // GUARDED_BY(migration_mu_)
  std::atomic<bool> migration_cancel_{false};
  std::mutex migration_mu_;  // before mu_: one Migrate or EndMigration at a time
  // Reset and Abort are called with mu_ held, so a request's checks under
  // mu_ and the gate's decision see one plan and one failure.
  Gate gate_;

  std::atomic<int64_t> lookups_{0}, ids_looked_up_{0}, pushes_applied_{0}, errors_{0};
  std::atomic<int64_t> rows_warmed_{0};  // distinct rows of parked lookups brought up from a slower tier
  // CPU time of the serving threads (ThreadCpuNanos: neither waits for a
  // core nor for a lock count) in pooling, row gradients, optimizer.
  std::atomic<int64_t> lookup_ns_{0}, backward_ns_{0}, apply_ns_{0};
};

}  // namespace tessera
