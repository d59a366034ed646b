// Master: the job's coordinator (DESIGN.md §1). It owns the config, the
// membership and the sharding plan; it never holds parameters or data.
//
// Life of a job:
//   1. Parameter servers and trainers register (REGISTER); servers get ranks.
//   2. When the config's counts have registered, the master plans the
//      sharding, creates the shards on the servers (CREATE_SHARDS) and
//      answers every trainer's WAIT_START with the job, the plan and the
//      servers' addresses.
//   3. Trainers train; they heartbeat and report progress, which the master
//      prints. Any member silent for runtime.peer_timeout_ms ends the job
//      with an error naming it (no hanging on a dead trainer).
//   4. When every trainer has reported done, the master (optionally) has the
//      servers dump their shards, shuts them down and prints a summary.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "master/kv_store.h"

namespace tessera {

struct MasterOptions {
  // Where to listen; port 0 picks a free one (see endpoint()).
  std::string bind_address = "tcp://127.0.0.1:0";
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
  // Fault injection for tests: the process dies in the middle of its Nth
  // checkpoint (servers snapshotted, manifest not yet written). 0 = never.
  int crash_in_checkpoint = 0;
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

  // Ends the job with `reason` (a signal, an operator). Thread-safe.
  void RequestAbort(const std::string& reason);

  // Asks for a checkpoint at the next step boundary every trainer can reach
  // (SIGUSR1, the COMMAND op). Thread-safe. Fails when the job has no
  // checkpoint.dir.
  Status RequestCheckpoint(const std::string& why);

 private:
  enum class State { kWaiting, kStarting, kRunning, kDone, kAborted };
  using Clock = std::chrono::steady_clock;

  struct PsMember {
    std::string endpoint, host;
    int64_t pid = 0;
    int64_t memory_bytes = 0;  // for embedding rows; 0 = no limit
    Clock::time_point last_seen;
    nlohmann::json stats;
  };
  struct TrainerMember {
    std::string host;
    int64_t pid = 0;
    Clock::time_point last_seen;
    bool done = false;
    nlohmann::json report;
  };
  struct Progress {
    int reported = 0;
    double loss_sum = 0;  // weighted by examples
    double examples = 0;
    double examples_per_s = 0;
  };

  Master() = default;
  void Handle(Message&& m, Responder r);
  // The JSON handlers take the responder by reference: when one throws on a
  // malformed body before it has answered, Handle still answers.
  void HandleRegister(const nlohmann::json& body, Responder& r);
  void HandleHeartbeat(const nlohmann::json& body, Responder& r);
  void HandleWaitStart(const nlohmann::json& body, Responder& r);
  void HandleReportDone(const nlohmann::json& body, Responder& r);
  void HandleCheckpointBarrier(Message&& m, Responder r);

  // Checkpoints (master/master_checkpoint.cc).
  // When every running trainer waits at the barrier: checkpoint if they all
  // wait at one step, else send the behind ones on to the furthest step.
  // REQUIRES: lock held (released while the checkpoint is written).
  Status ServeBarrier(std::unique_lock<std::mutex>* lock);
  Status TakeCheckpoint(int64_t step, const std::string& trainer_state);
  // Loads the newest complete checkpoint for --resume: checks the tables
  // match and fills resume_*.
  Status LoadResumePoint();

  // The answer to WAIT_START: JSON, plus the trainer state when resuming.
  Message StartReply(const Header& request) const;  // REQUIRES: mu_ held or start_info_ final
  Status WaitForMembers();
  Status StartJob();
  Status MonitorUntilDone();
  // The first dead member found, as an error naming it. REQUIRES: mu_ held.
  Status FindDeadMember(Clock::time_point now) const;
  void PrintProgress();  // REQUIRES: mu_ held
  void AbortJob(const Status& reason);
  StatusOr<JobSummary> FinishJob();
  nlohmann::json CallServer(int ps, Opcode op, const nlohmann::json& body, std::chrono::milliseconds timeout,
                            Status* status);
  bool AbortRequested(Status* reason);

  MasterOptions options_;
  JobConfig job_;
  std::string endpoint_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  std::vector<int> ps_peers_;
  KvStore store_;
  Clock::time_point started_at_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kWaiting;                        // GUARDED_BY(mu_)
  Status abort_reason_;                                  // GUARDED_BY(mu_)
  std::vector<PsMember> ps_;                             // GUARDED_BY(mu_)
  std::vector<std::optional<TrainerMember>> trainers_;  // GUARDED_BY(mu_)
  std::vector<Responder> start_waiters_;                 // GUARDED_BY(mu_)
  nlohmann::json start_info_;                            // GUARDED_BY(mu_)
  std::optional<ShardingPlan> plan_;                     // GUARDED_BY(mu_)
  std::map<int64_t, Progress> progress_;                 // GUARDED_BY(mu_)
  std::string requested_abort_;                          // GUARDED_BY(mu_)
  std::string reported_failure_;                         // GUARDED_BY(mu_)
  Clock::time_point reported_failure_at_;                // GUARDED_BY(mu_)

  struct Arrival {
    int64_t step = 0;
    Responder responder;
  };
  std::vector<std::optional<Arrival>> barrier_;         // GUARDED_BY(mu_): per trainer
  std::string barrier_state_;                            // GUARDED_BY(mu_): trainer 0's
  // Requests are numbered; the barrier serves every request up to its own.
  int64_t checkpoint_requested_id_ = 0;                  // GUARDED_BY(mu_)
  int64_t checkpoint_served_id_ = 0;                     // GUARDED_BY(mu_)
  nlohmann::json checkpoints_ = nlohmann::json::array(); // GUARDED_BY(mu_): taken this run
  int checkpoints_attempted_ = 0;  // by TakeCheckpoint only
  // Set by LoadResumePoint.
  int64_t resume_step_ = 0;
  nlohmann::json resume_restore_;  // the old shards, for CREATE_SHARDS
  std::string resume_state_;       // trainer state bytes
};

}  // namespace tessera
