// TrainerMember: one trainer's membership of a job, whatever model it trains.
// It registers with the master (again when a master restarted with
// --recover takes over), keeps a heartbeat that informs the master and ends
// the membership when the job is aborted or the master is gone, follows the
// job's generations (a rollback starts a new one; backups taking over a lost
// server's shards move the running one to a new plan), keeps the
// connections to the servers of the running generation, meets the others at
// checkpoint barriers and sends the final report.
//
// The C++ trainer (trainer/trainer.h) trains its built-in model through it;
// the Python package (python/) trains a PyTorch model through it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/job_keys.h"
#include "common/peer_pool.h"
#include "common/rpc_client.h"
#include "common/status.h"
#include "trainer/embedding_client.h"

namespace tessera {

struct TrainerMemberOptions {
  // The job's CURVE keys (common/job_keys.h); null: plain TCP (--insecure).
  std::shared_ptr<const JobKeys> keys;
  std::string master;  // "tcp://host:port"
  int rank = 0;
  int world = 1;
  int64_t register_timeout_ms = 120000;
  // Called (once, from the heartbeat thread) when the job is over for this
  // trainer whatever it is doing — the master aborted it or is gone.
  std::function<void(const Status&)> on_fatal;
};

class TrainerMember {
 public:
  // Connects to the master (registering is Join's).
  static StatusOr<std::unique_ptr<TrainerMember>> Connect(const TrainerMemberOptions& options);
  ~TrainerMember();

  // Registers and starts the heartbeat.
  Status Join();

  // What a generation starts from: the master's StartInfo and, from a
  // checkpoint, trainer 0's saved state.
  struct GenerationStart {
    StartInfo info;
    std::string state_bytes;
  };
  // Waits for the first generation newer than `after` (0: the job's start),
  // asking a master that took over again, and makes it the running one.
  StatusOr<GenerationStart> NextGeneration(int64_t after);
  // Connects to the servers of `info` (closing those it lacks) and returns
  // the route requests take in it.
  StatusOr<EmbeddingRoute> EnterGeneration(const StartInfo& info);
  // Options for an EmbeddingClient of `job` in the running generation; with
  // replicas, requests follow backups that take over (FollowPromotion), and
  // *generation moves with them. *generation must outlive the client.
  EmbeddingClientOptions ClientOptions(const JobConfig& job, int64_t* generation);
  // After a generation ended with an error: whether the master starts a
  // newer one (it may first have to notice a lost server: up to a peer
  // timeout).
  bool AwaitNewGeneration(int64_t generation);

  // A checkpoint barrier at `step` of *generation (which a reroute moves
  // on, as ClientOptions' does): arrives (rank 0 with
  // state(), the trainers' state the checkpoint keeps), calls `arrived`
  // (fault injection; may be null), and waits until the checkpoint is taken.
  // Cancelled when the job's servers change at this boundary (the next
  // generation starts here). `embeddings` (may be null) follows a lost
  // server's backups when the barrier fails because of it.
  Status Barrier(int64_t step, const int64_t* generation, const std::function<StatusOr<std::string>()>& state,
                 EmbeddingClient* embeddings, const std::function<void()>& arrived, int64_t timeout_ms);

  // Progress for the master (sent with the next heartbeat, at once).
  void SendProgress(const TrainerProgress& progress);
  // Tells the master this trainer is done: `report` (steps, examples, loss,
  // eval, ...) with ok/error from `st`, or from the fatal error that ended
  // the membership. Returns the status the trainer ends with.
  Status ReportDone(nlohmann::json report, Status st);

  // The error that ended the membership (the heartbeat's), or OK.
  Status fatal() const;

  int rank() const { return options_.rank; }
  int world() const { return options_.world; }
  // The job's keys; null with --insecure.
  const JobKeys* keys() const { return options_.keys.get(); }
  RpcClient* client() { return client_.get(); }
  int master_peer() const { return master_peer_; }
  // This trainer in requests to the master: its rank and registration.
  TrainerId Id() const;
  int64_t running_generation() const { return running_generation_.load(); }
  // Set when the running generation is over (servers lost or the job
  // aborted): the training thread stops between steps.
  const std::atomic<bool>* stop_training() const { return &stop_training_; }
  // Steps finished, all generations: the master's stall watchdog reads it.
  std::atomic<int64_t>* steps_done() { return &steps_done_; }
  // Set from the master's heartbeat replies while a checkpoint on demand is
  // asked for and no barrier has served it yet.
  const std::atomic<bool>* checkpoint_requested() const { return &checkpoint_requested_; }

 private:
  TrainerMember() = default;
  // Registers (again, when the master was replaced: then with the
  // generation this trainer ran, which the new master's go on from).
  Status Register();
  // After a request the master refused or never answered: whether the
  // heartbeat finds, within a few heartbeats, that a new master took over
  // (master_changes_ moves past `changes`).
  bool AwaitMasterChange(int64_t changes);
  StatusOr<GenerationStart> WaitStart(int64_t after);
  // With replicas: the plan a lost server's backups serve, once the master
  // published it; *generation becomes its generation. An error when the
  // change is a rollback instead (the generation ends, the next one starts).
  StatusOr<EmbeddingRoute> FollowPromotion(int64_t* generation, const Status& why);
  // Ends the calls in flight to the servers of the running generation.
  void CancelServerCalls(const Status& why);
  void HeartbeatLoop();

  TrainerMemberOptions options_;
  std::unique_ptr<RpcClient> client_;
  int master_peer_ = -1;
  // This trainer's registration: every request to the master carries it, so
  // a replacement of the same rank is told apart from a replaced trainer.
  std::atomic<int64_t> incarnation_{0};
  // The master this trainer registered with (a restarted master has another
  // id and has the trainer register again), and how often that happened:
  // calls to the old master are cancelled then, and NextGeneration asks again.
  std::atomic<int64_t> master_id_{0};
  std::atomic<int64_t> master_changes_{0};
  // False while the master is recovering, starting, or out of reach: a
  // newer generation is then on its way, however long that takes.
  std::atomic<bool> master_settled_{true};
  std::atomic<int64_t> heartbeat_ms_{500};
  std::atomic<int64_t> peer_timeout_ms_{10000};
  std::atomic<int64_t> master_reconnect_ms_{60000};

  std::thread heartbeat_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_heartbeat_ = false;                      // GUARDED_BY(mu_)
  std::optional<TrainerProgress> pending_progress_;  // GUARDED_BY(mu_)
  std::atomic<bool> stop_training_{false};
  std::atomic<int64_t> steps_done_{0};
  // The master's generation (from heartbeats and barriers) and the one this
  // trainer runs; when the first passes the second, the step is dropped.
  std::atomic<int64_t> master_generation_{0}, running_generation_{0};
  // Endpoint -> peer; only the generation's servers stay connected.
  std::unique_ptr<PeerPool<std::string>> server_peers_;
  std::optional<EmbeddingRoute> promoted_route_;  // the last plan a promotion gave; training thread
  std::vector<int> generation_peers_;             // GUARDED_BY(mu_)
  Status fatal_;                                  // GUARDED_BY(mu_)
  // Checkpoint requests: the master's newest request id (from heartbeats) and
  // the newest one a barrier served.
  std::atomic<int64_t> checkpoint_requested_id_{0}, checkpoint_served_id_{0};
  std::atomic<bool> checkpoint_requested_{false};
};

}  // namespace tessera
