// Master: the job's coordinator (DESIGN.md §1). It owns the config, the
// membership and the sharding plan; it never holds parameters or data.
//
// Life of a job:
//   1. Parameter servers and trainers register (REGISTER); each server gets a
//      member id (registration order, never reused).
//   2. When the config's counts have registered, the master starts the job's
//      first *generation*: it plans the sharding over the servers, creates
//      the shards (CREATE_SHARDS, telling each server its place in the plan)
//      and answers every trainer's WAIT_START with the job, the plan, the
//      servers' addresses and the generation.
//   3. Trainers train; they heartbeat and report progress, which the master
//      prints. A trainer silent for runtime.peer_timeout_ms ends the job with
//      an error naming it (no hanging on a dead trainer).
//   4. The servers change while the job trains, each change a new generation
//      (its number is the plan version), restored from a consistent cut:
//        - a server lost (dead, or silent for peer_timeout_ms): the
//          generation goes up at once, trainers drop their step and wait; the
//          job rolls back to the newest checkpoint (step 0 without one) on
//          the survivors plus any server that registered, and replays;
//        - a server added (one registers after the start) or removed
//          (--control remove_ps, SIGTERM to a server): the trainers stop at
//          the next step boundary as for a checkpoint, a checkpoint is taken
//          there, and the next generation starts from it on the new set of
//          servers (no rollback); a removed server is then shut down.
//   5. When every trainer has reported done, the master (optionally) has the
//      servers dump their shards, shuts them down and prints a summary.
#pragma once

#include <chrono>
#include <functional>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/peer_pool.h"
#include "common/prometheus_text.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "master/kv_store.h"
#include "master/listening_clock.h"
#include "master/progress_line.h"
#include "master/step_barrier.h"

namespace tessera {

struct MasterOptions {
  // The job's CURVE keys (common/job_keys.h); null: plain TCP (--insecure).
  std::shared_ptr<const JobKeys> keys;
  // Where to listen; port 0 picks a free one (see endpoint()).
  std::string bind_address = "tcp://127.0.0.1:0";
  // How many connections its port takes (--max_connections_per_peer,
  // --max_connections).
  ConnectionLimits connections;
  // Host name others reach the master by ("" keeps the bind host).
  std::string advertise_host;
  // How long to wait for the job's servers and trainers to register.
  int64_t register_timeout_ms = 600000;
  // When set, servers write their shards and trainer 0 its dense model here
  // at the end of the job (for tests and offline checks).
  std::string dump_dir;
  // Start from the newest complete checkpoint under checkpoint.dir, re-planned
  // for the servers of this run (their number may differ).
  bool resume = false;
  // Take over a job whose master died: its live servers and trainers
  // re-register with this one (they retry the address for
  // runtime.master_reconnect_ms), and the job rolls back to its newest
  // checkpoint, or to step 0 without one. Servers beyond the config's count
  // are welcome (servers may have been added); the job starts once every
  // trainer and the config's count of servers (or, after a peer timeout, at
  // least one) have registered.
  bool recover = false;
  // Standard output is a terminal: progress is one live line redrawn in
  // place (master_main sets it); otherwise plain log lines.
  bool live_progress = false;
  // Fault injection for tests: called in the middle of the Nth checkpoint
  // (servers snapshotted, manifest not yet written); main() ends the process
  // there. 0 = never.
  int crash_in_checkpoint = 0;
  // Likewise in the middle of the Nth change of the servers while the job
  // runs (the servers hold the new plan's shards, the trainers have not been
  // told). 0 = never.
  int crash_in_migration = 0;
  std::function<void()> crash_hook;
};

// What the master learned by the end of a job.
struct JobSummary {
  nlohmann::json json;  // printed and written by tessera_master
};

class Master {
 public:
  static StatusOr<std::unique_ptr<Master>> Start(const MasterOptions& options, const JobConfig& job);
  ~Master();

  // The address servers and trainers pass as --master.
  const std::string& endpoint() const { return endpoint_; }

  // Runs the job to its end. OK with a summary, or the reason it failed
  // (the servers are told to abort, trainers learn it from heartbeats).
  StatusOr<JobSummary> Run();

  // The job as the master sees it, for its metrics endpoint: members, the
  // last step every trainer reported (loss, examples/s), checkpoints,
  // recoveries, and its own requests by opcode. Thread-safe.
  void WriteMetrics(PrometheusText* out) const;

  // Ends the job with `reason` (a signal, an operator). Thread-safe.
  void RequestAbort(const std::string& reason);

  // Asks for a checkpoint at the next step boundary every trainer can reach
  // (SIGUSR1, the COMMAND op). Thread-safe. Fails when the job has no
  // checkpoint.dir.
  Status RequestCheckpoint(const std::string& why);

  // Drains parameter server `member` (its member id) to the others at the
  // next step boundary, then shuts it down (it exits 0). Thread-safe. Fails
  // when it is not a server of the job, is the last one, or the job has no
  // checkpoint.dir (the change goes through a checkpoint).
  Status RequestRemoveServer(int member, const std::string& why);

 private:
  enum class State { kWaiting, kStarting, kRunning, kRecovering, kDone, kAborted };
  using Clock = std::chrono::steady_clock;

  struct PsMember {
    std::string endpoint, host;
    int64_t pid = 0;
    int64_t memory_bytes = 0;  // for embedding rows; 0 = no limit
    Clock::time_point last_seen;
    nlohmann::json stats;
    bool leaving = false;  // to be drained and shut down at the next boundary
    // Its first heartbeat came, so it has taken its registration's reply and
    // knows this master's connection: until then it refuses the master's
    // orders (PERMISSION_DENIED), so a change of servers waits for it.
    bool ready = false;
    // The connection it registered from (RpcClient::routing_id()): only
    // that one may speak for it.
    std::string routing_id;
  };
  struct TrainerMember {
    std::string host;
    int64_t pid = 0;
    // Which registration holds the rank: a replacement gets a new one, so a
    // replaced trainer that wakes (SIGSTOP) is refused, not taken for it.
    int64_t incarnation = 0;
    Clock::time_point last_seen;
    // Its steps_done as last heard, and when that last changed (a stall:
    // alive, but no step).
    int64_t steps_done = -1;
    Clock::time_point stepped_at;
    bool done = false;
    nlohmann::json report;
    std::string routing_id;  // as PsMember's
  };
  struct Progress {
    int reported = 0;
    double loss_sum = 0;  // weighted by examples
    double examples = 0;
    double examples_per_s = 0;
    int64_t epoch = -1;        // the highest a trainer reported
    int64_t total_steps = 0;   // as the trainers count them
  };
  // A consistent cut a generation starts from: a checkpoint, or nothing
  // (step 0: every row at its initial value, the dense model from its seed).
  struct RestorePoint {
    int64_t step = 0;
    std::string dir;             // "" for step 0
    nlohmann::json restore;      // the old shards, for CREATE_SHARDS; null for step 0
    std::string trainer_state;   // trainer 0's state bytes; "" for step 0
    // The servers' live state is this cut (a checkpoint taken at this very
    // boundary, for a change of the servers): a server may keep a shard it
    // holds already instead of reloading it. Never for a rollback.
    bool live = false;
    // The servers staged the shards they do not keep (a migration to this
    // plan version, MigrateServers): nothing is loaded.
    uint32_t staged = 0;
  };
  struct StartWaiter {
    int64_t after_generation = 0;  // answered by a generation newer than this
    TrainerId trainer;             // who asks: checked again when answered
    Responder responder;
  };
  Master() = default;
  void Handle(Message&& m, Responder r);
  // The handlers take a body Handle parsed (common/control_messages.h), so
  // what they read is well-formed; they answer through the responder.
  void HandleRegister(const RegisterRequest& req, Responder& r);
  void HandleHeartbeat(const HeartbeatRequest& req, Responder& r);
  void HandleWaitStart(const WaitStartRequest& req, Responder& r);
  void HandleReportDone(const ReportDone& done, Responder& r);
  void HandleCommand(const Command& command, Responder& r);
  void HandleCheckpointBarrier(Message&& m, Responder r);

  // Checkpoints (master/master_checkpoint.cc).
  // When every running trainer waits at the barrier: checkpoint (and change
  // the servers, when that is pending) if they all wait at one step.
  // REQUIRES: lock held (released while the checkpoint is written).
  Status ServeBarrier(std::unique_lock<std::mutex>* lock);
  // Writes a checkpoint at `step`; its folder in *dir, its manifest in *manifest.
  Status TakeCheckpoint(int64_t step, const std::string& trainer_state, std::string* dir, nlohmann::json* manifest);
  // The checkpoint in `dir` (its manifest read), checked against this job.
  StatusOr<RestorePoint> ReadRestorePoint(const std::string& dir, const nlohmann::json& manifest) const;
  // The newest complete checkpoint, or step 0 when there is none.
  StatusOr<RestorePoint> NewestRestorePoint(bool required) const;

  // Generations (master/master_generations.cc).
  // Plans over `members` (member ids, in the order they get plan ranks),
  // creates their shards restored from `from`, and lets the trainers start
  // generation generation_ + 1 there. Servers of the old generation not in
  // `members` that are alive and leaving are shut down.
  // With `planned`, on that plan (MigrateServers made it).
  Status StartGeneration(const std::vector<int>& members, const RestorePoint& from,
                         const ShardingPlan* planned = nullptr);
  // The plan of the next generation over `members`: the running plan's
  // shards stay where they can. Prints it and how many rows change servers
  // (`how` says how they get there).
  StatusOr<ShardingPlan> PlanServers(const std::vector<int>& members, const std::string& how);
  // The servers change at the boundary of `step`, where the trainers wait
  // (trainer 0's state: `trainer_state`): the rows that change servers go
  // straight from their old owners to the new ones (MIGRATE, FETCH_ROWS),
  // and the next generation starts there, on `members`. No checkpoint, no
  // rollback.
  Status MigrateServers(const std::vector<int>& members, int64_t step, const std::string& trainer_state);
  // A server of the running generation is lost: roll back and go on.
  Status RecoverFromLostServer(int member, const Status& why);
  // With replicas: whether every shard server `member` serves has a backup
  // on a live server, so that losing it needs no rollback. REQUIRES: mu_.
  bool CanPromote(int member) const;
  // Server `member` is lost and the backups of its shards take over: the
  // surviving servers keep their state and follow a plan without it
  // (PROMOTE), trainers re-route the step they are in. New backups come
  // with the next step boundary's change of plan. Falls back to a rollback
  // when a server refuses.
  Status PromoteBackups(int member, const Status& why);
  // Trainer `rank` is lost: wait for a replacement, roll back and go on.
  Status RecoverFromLostTrainer(int rank, const Status& why);
  // The generation in flight is over (a member was lost): trainers at the
  // barrier are told, the next one is awaited. Counts against
  // runtime.max_recoveries. REQUIRES: mu_ held.
  Status EndGenerationForRecovery(const Status& why, std::vector<Responder>* at_barrier);
  // Rolls the job back to the newest checkpoint (step 0 without one) on the
  // servers NextServers() gives.
  Status RollBack(const std::string& what);
  // Whether the next boundary changes the servers: they differ and, when a
  // precopy comes first, it is done.
  bool ServerChangePending() const;  // REQUIRES: mu_ held
  // Servers registered and not in the generation, leaving, or backups
  // missing: the job's servers are to change. REQUIRES: mu_ held.
  bool ServersDiffer() const;
  // Whether a change of servers copies its rows while the job trains first
  // (runtime.precopy, and no precopy failed). REQUIRES: mu_ held.
  bool PrecopyFirst() const;
  // After a promotion the plan lacks the backups it should have: the next
  // boundary re-plans (a migration) to build them.
  bool backups_missing_ = false;  // GUARDED_BY(mu_)
  bool generation_promoted_ = false;  // GUARDED_BY(mu_): the running generation came from a promotion
  std::vector<int> NextServers() const;  // REQUIRES: mu_ held

  // The answer to WAIT_START: JSON, plus the trainer state when starting
  // from a checkpoint.
  Message StartReply(const Header& request) const;  // REQUIRES: mu_ held
  Status WaitForMembers();
  Status StartJob();
  Status MonitorUntilDone();
  // The first dead member found, as an error naming it; *ps is its member
  // id when it is a server of the running generation, *trainer its rank when
  // it is a trainer, else -1. Dead servers outside the generation are
  // dropped. REQUIRES: mu_ held.
  Status FindDeadMember(Clock::time_point now, int* ps, int* trainer = nullptr);
  // Whether a request comes from the trainer that holds its rank now.
  // REQUIRES: mu_ held.
  Status CheckTrainer(const TrainerId& trainer) const;
  // And that `sender` is that trainer's own connection. REQUIRES: mu_ held.
  Status CheckTrainer(const TrainerId& trainer, const Responder& sender) const;
  // Whether `sender` is a trainer of this job (the rendezvous store is theirs).
  bool IsTrainerConnection(const Responder& sender) const;  // REQUIRES: mu_ held
  // Each trainer's connection by rank ("" for a free rank), for the servers,
  // which serve only these (CREATE_SHARDS, PROMOTE). Takes mu_.
  std::vector<std::string> TrainerConnections() const;
  std::string DescribeServer(int member) const;  // REQUIRES: mu_ held
  // A running trainer that finished no step for runtime.stall_timeout_ms,
  // as an error naming it; OK when none. REQUIRES: mu_ held.
  Status FindStalledTrainer(Clock::time_point now) const;
  // A checkpoint at `step` failed with `failure`. While every member lives
  // (its storage failed: a full disk, a permission) the job goes on without
  // it: logged, counted, its folder removed, OK returned. Otherwise (a lost
  // member, which the monitor recovers from; an internal error) `failure`.
  // Takes mu_.
  Status OutliveFailedCheckpoint(int64_t step, const Status& failure);
  // Every check of members' silence first notes itself, so that a pause of
  // the master is not counted as their silence (listening_clock.h).
  // REQUIRES: mu_ held.
  void NoteSilenceCheck(Clock::time_point now);
  void PrintProgress();  // REQUIRES: mu_ held
  std::unique_ptr<ProgressLine> progress_line_;  // GUARDED_BY(mu_)
  // The last step every trainer reported, as PrintProgress shows it.
  struct ShownProgress {
    int64_t step = 0, total = 0, epoch = 0;
    double loss = 0, examples_per_s = 0;
    bool any = false;
  };
  ShownProgress shown_;  // GUARDED_BY(mu_)
  void AbortJob(const Status& reason);
  StatusOr<JobSummary> FinishJob();
  // A call to server `member`; the body of its reply. When `watch`, the
  // call also ends (UNAVAILABLE) as soon as the server misses its
  // heartbeats for peer_timeout_ms: a server that dies during a long call
  // (a snapshot) is named, not waited for until the deadline.
  nlohmann::json CallServer(int member, Opcode op, const nlohmann::json& body, std::chrono::milliseconds timeout,
                            Status* status, bool watch = false);
  // Calls to several servers at once (one body each, by position), and what
  // they answered. Awaiting them ends (UNAVAILABLE) the calls to a server
  // that stops heartbeating or whose connection closes (a dead or hung one
  // is named, not waited for); replies wake the waiter as they come.
  struct ServerCalls {
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      std::vector<std::optional<StatusOr<Message>>> replies;
      std::vector<double> seconds;  // from the start to each reply
      size_t done = 0;
    };
    std::shared_ptr<Shared> shared;  // outlives the wait if a reply comes late
    std::vector<int> members, peers;
    Opcode op = Opcode::kInvalid;
  };
  struct ServerReply {
    StatusOr<nlohmann::json> body = Status::Internal("no reply");
    double seconds = 0;
  };
  // When the connection to RpcClient peer `peer` (a server) closed, if it
  // has stayed closed runtime.connection_loss_ms: the server crashed.
  std::optional<Clock::time_point> ConnectionLostSince(int peer, Clock::time_point now) const;
  ServerCalls StartServerCalls(const std::vector<int>& members, Opcode op, const std::vector<nlohmann::json>& bodies,
                               std::chrono::milliseconds timeout);
  std::vector<ServerReply> AwaitServerCalls(const ServerCalls& calls);
  StatusOr<int> ServerPeer(int member);

  // New backups copied while the job trains (MIGRATE {phase: precopy} to
  // the plan that has them): the next boundary then moves only the rows
  // updated since (MigratePhase::kChanged) instead of all of them.
  struct Precopy {
    ShardingPlan plan;
    std::vector<int> members;   // of the new plan, by rank
    std::vector<int> involved;  // members, then servers that only serve
    ServerCalls calls;
    Clock::time_point started;
    bool Finished() const;
    // OK once every server staged its copies (adding up the rows and bytes
    // they fetched); the first error otherwise.
    Status Outcome(int64_t* rows = nullptr, int64_t* bytes = nullptr) const;
  };
  // Starts a precopy when the only change waiting is new backups after a
  // promotion. Monitor thread; takes mu_.
  void MaybeStartPrecopy();
  // The MIGRATE bodies that move the job to `plan` on `members`, and the
  // servers they go to (*involved: members, then old servers that only
  // serve). REQUIRES: mu_ held.
  Status MigrationBodies(const ShardingPlan& plan, const std::vector<int>& members, int64_t step, MigratePhase phase,
                         std::vector<int>* involved, std::vector<nlohmann::json>* bodies) const;
  std::optional<Precopy> precopy_;  // GUARDED_BY(mu_)
  bool precopy_failed_ = false;     // GUARDED_BY(mu_): the last one did; the boundary moves all rows
  bool AbortRequested(Status* reason);

  MasterOptions options_;
  JobConfig job_;
  std::string endpoint_;
  // Names this master among the job's masters: members send it back in
  // their heartbeats, so a member of a master that died is told to register
  // again instead of being taken for a stranger (or fenced).
  int64_t master_id_ = 0;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  // Member id -> peer of client_. A server that is no longer a member is
  // forgotten (else ZeroMQ keeps reconnecting to it, and its sockets stay open).
  std::unique_ptr<PeerPool<int>> ps_peers_;
  KvStore store_;
  Clock::time_point started_at_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kWaiting;                        // GUARDED_BY(mu_)
  Status abort_reason_;                                  // GUARDED_BY(mu_)
  std::map<int, PsMember> ps_;                           // GUARDED_BY(mu_): by member id
  int next_ps_id_ = 0;                                   // GUARDED_BY(mu_)
  std::vector<int> generation_ps_;                       // GUARDED_BY(mu_): member ids by plan rank
  int64_t generation_ = 0;                               // GUARDED_BY(mu_): 0 before the start
  int recoveries_ = 0;                                   // GUARDED_BY(mu_)
  std::vector<std::optional<TrainerMember>> trainers_;  // GUARDED_BY(mu_)
  int64_t next_incarnation_ = 1;                         // GUARDED_BY(mu_)
  std::vector<StartWaiter> start_waiters_;               // GUARDED_BY(mu_)
  nlohmann::json start_info_;                            // GUARDED_BY(mu_)
  std::string start_state_;                              // GUARDED_BY(mu_): trainer state bytes
  std::optional<ShardingPlan> plan_;                     // GUARDED_BY(mu_)
  std::map<int64_t, Progress> progress_;                 // GUARDED_BY(mu_)
  std::string requested_abort_;                          // GUARDED_BY(mu_)
  std::string reported_failure_;                         // GUARDED_BY(mu_)
  Clock::time_point reported_failure_at_;                // GUARDED_BY(mu_)
  // Silence counts only while the master could hear (listening_clock.h).
  ListeningClock listening_;                             // GUARDED_BY(mu_)
  nlohmann::json generations_ = nlohmann::json::array(); // GUARDED_BY(mu_): for the summary

  StepBarrier<Responder> barrier_;                       // GUARDED_BY(mu_)
  std::string barrier_state_;                            // GUARDED_BY(mu_): trainer 0's
  // Requests are numbered; the barrier serves every request up to its own.
  // A pending change of the servers is a request too (it goes through a
  // checkpoint at the boundary).
  int64_t checkpoint_requested_id_ = 0;                  // GUARDED_BY(mu_)
  int64_t checkpoint_served_id_ = 0;                     // GUARDED_BY(mu_)
  // The newest request that asked for a checkpoint itself (an operator's),
  // not only for a boundary where the servers change.
  int64_t checkpoint_ordered_id_ = 0;                    // GUARDED_BY(mu_)
  // Each migration's rows, bytes and seconds, for the job summary.
  std::vector<nlohmann::json> migration_stats_;          // GUARDED_BY(mu_)
  nlohmann::json checkpoints_ = nlohmann::json::array(); // GUARDED_BY(mu_): taken this run
  // Checkpoints that failed while every member lived ({step, error}): the
  // job went on without them.
  nlohmann::json failed_checkpoints_ = nlohmann::json::array();  // GUARDED_BY(mu_)
  int checkpoints_attempted_ = 0;  // by TakeCheckpoint only
  int migrations_attempted_ = 0;   // by the generation that changes servers only
};

}  // namespace tessera
