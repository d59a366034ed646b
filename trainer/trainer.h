// Trainer: one trainer process's life — register with the master, wait for
// the job to start, wire the data, the model, the lookups and the collective,
// train, report. A heartbeat thread keeps the master informed and ends the
// process when the master aborts the job or is gone, so no trainer is left
// behind waiting on a dead peer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/rpc_client.h"
#include "common/status.h"
#include "trainer/collective.h"
#include "trainer/embedding_client.h"

namespace tessera {

struct TrainerOptions {
  // The job's CURVE keys (common/job_keys.h); null: plain TCP (--insecure).
  std::shared_ptr<const JobKeys> keys;
  std::string master;  // "tcp://host:port"
  int rank = 0;
  int world = 1;
  // Per-step metrics as JSON lines; "" writes none.
  std::string metrics_file;
  // Address the collective binds to and peers reach this trainer at.
  std::string host = "127.0.0.1";
  // BLAS threads for the dense layers. Several trainers often share a host.
  int blas_threads = 1;
  // Where the dense model computes: -1 the CPU (OpenBLAS, Gloo allreduce);
  // N >= 0 CUDA device N (cuBLAS, optimizer on the GPU, NCCL allreduce).
  // The embeddings travel the same way on both.
  int device = -1;
  int64_t register_timeout_ms = 120000;
  // Called (once, from the heartbeat thread) when the job is over for this
  // trainer whatever it is doing — the master aborted it or is gone. Run()
  // returns that status as soon as its thread is free; main() may end the
  // process here instead, should that thread be stuck with a dead peer.
  std::function<void(const Status&)> on_fatal;
  // Fault injection for tests: the training thread stops at this step and
  // stays there (heartbeats go on): a stuck trainer. -1: never.
  int64_t test_stall_at_step = -1;
  // Fault injection for tests: at its Nth checkpoint barrier the trainer
  // arrives (its request sent), then calls crash_hook while the master
  // snapshots. 0 = never.
  int test_crash_in_checkpoint = 0;
  std::function<void()> crash_hook;
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Start(const TrainerOptions& options);
  // Why this build cannot train on a GPU (it lacks NCCL), or "" when it can.
  static std::string GpuPathMissing();
  ~Trainer();

  // Trains the job to its end and reports to the master.
  Status Run();

 private:
  Trainer() = default;
  // Registers (again, when the master was replaced: then with the
  // generation this trainer ran, which the new master's go on from).
  Status Register();
  // After a request the master refused or never answered: whether the
  // heartbeat finds, within a few heartbeats, that a new master took over
  // (master_changes_ moves past `changes`).
  bool AwaitMasterChange(int64_t changes);
  // What a generation starts from: the master's StartInfo and, from a
  // checkpoint, trainer 0's saved state.
  struct GenerationStart {
    StartInfo info;
    std::string state_bytes;
  };
  // The start of the first generation newer than `after` (0: the job's start).
  StatusOr<GenerationStart> WaitStart(int64_t after);
  // This trainer in requests to the master: its rank and registration.
  TrainerId Id() const;
  // Trains one generation: to the job's end (OK), or until it is replaced
  // (an error; the master's generation has moved on) or fails.
  Status Train(const GenerationStart& start, nlohmann::json* report);
  // With replicas: the plan a lost server's backups serve, once the master
  // published it; *generation becomes its generation. An error when the
  // change is a rollback instead (Train ends, Run starts the next one).
  StatusOr<EmbeddingRoute> FollowPromotion(int64_t* generation, const Status& why);
  // After Train failed in `generation`: whether the master starts a newer
  // one (it may first have to notice a lost server: up to a peer timeout).
  bool AwaitNewGeneration(int64_t generation);
  // Ends the calls in flight to the servers of the running generation.
  void CancelServerCalls(const Status& why);
  StatusOr<int> ServerPeer(const std::string& endpoint);
  // Closes the connections to servers that are not in `endpoints` (the
  // generation's): lost or removed ones. Main thread.
  void ForgetServersNotIn(const std::vector<std::string>& endpoints);
  // Local for a world of one, NCCL between GPU trainers, Gloo between CPU ones.
  // NCCL where every trainer has a GPU of its own; otherwise Gloo, through
  // host memory (GPU trainers stage their gradients there).
  StatusOr<std::unique_ptr<Collective>> OpenCollective(const JobConfig& job);
  StatusOr<std::unique_ptr<Collective>> OpenGlooCollective(const JobConfig& job);
  // "" when NCCL can serve the job, else why not; agreed through the master.
  StatusOr<std::string> WhyNotNccl(const JobConfig& job);
  void HeartbeatLoop();
  void SendProgress(const TrainerProgress& progress);

  TrainerOptions options_;
  std::unique_ptr<RpcClient> client_;
  int master_peer_ = -1;
  // This trainer's registration: every request to the master carries it, so
  // a replacement of the same rank is told apart from a replaced trainer.
  std::atomic<int64_t> incarnation_{0};
  // The master this trainer registered with (a restarted master has another
  // id and has the trainer register again), and how often that happened:
  // calls to the old master are cancelled then, and Run asks again.
  std::atomic<int64_t> master_id_{0};
  std::atomic<int64_t> master_changes_{0};
  // False while the master is recovering, starting, or out of reach: a
  // newer generation is then on its way, however long that takes.
  std::atomic<bool> master_settled_{true};
  std::unique_ptr<Store> store_;  // the master's store (MasterStore), where the collectives meet
  std::atomic<int64_t> heartbeat_ms_{500};
  std::atomic<int64_t> peer_timeout_ms_{10000};
  std::atomic<int64_t> master_reconnect_ms_{60000};

  std::thread heartbeat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_heartbeat_ = false;          // GUARDED_BY(mu_)
  std::optional<TrainerProgress> pending_progress_;  // GUARDED_BY(mu_)
  std::atomic<bool> stop_training_{false};
  std::atomic<int64_t> steps_done_{0};  // steps finished, all generations; sent in heartbeats
  int barriers_arrived_ = 0;  // checkpoint barriers, all generations (test_crash_in_checkpoint); training thread
  // The master's generation (from heartbeats and barriers) and the one this
  // trainer runs; when the first passes the second, the step is dropped.
  std::atomic<int64_t> master_generation_{0}, running_generation_{0};
  std::map<std::string, int> server_peers_;  // endpoint -> peer; main thread
  std::optional<EmbeddingRoute> promoted_route_;  // the last plan a promotion gave; main thread
  std::vector<int> generation_peers_;        // GUARDED_BY(mu_)
  Status fatal_;                             // GUARDED_BY(mu_)
  // Checkpoint requests: the master's newest request id (from heartbeats) and
  // the newest one a barrier served.
  std::atomic<int64_t> checkpoint_requested_id_{0}, checkpoint_served_id_{0};
  std::atomic<bool> checkpoint_requested_{false};
};

}  // namespace tessera
