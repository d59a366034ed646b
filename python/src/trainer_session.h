// TrainerSession: a trainer whose model is not Tessera's but its user's (the
// Python package, python/tessera): it joins the job as trainer `rank` of
// `world` (TrainerMember), looks the job's features up on the servers and
// sends their output gradients back, step by step, as the user's loop asks.
//
// Steps are counted here, from the generation's start step: every training
// lookup is the next step, and its gradients must be pushed before the next
// training lookup (in sync mode the servers' step barrier waits for them).
// Evaluation lookups (inference) read at the current step and open nothing;
// between a training lookup and its push, at that lookup's step.
//
// Not thread-safe: one step at a time, from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/keyed_jagged_tensor.h"
#include "common/status.h"
#include "python/src/session_metrics.h"
#include "trainer/collective.h"
#include "trainer/data_parallel_tables.h"
#include "trainer/embedding_client.h"
#include "trainer/master_store.h"
#include "trainer/trainer_member.h"

namespace tessera {

struct TrainerSessionOptions {
  std::string master;  // "tcp://host:port"
  int rank = 0;
  int world = 1;
  // The job's key folder (scripts/make_job_keys.sh), or insecure for plain TCP.
  std::string keys_dir;
  bool insecure = false;
  int64_t register_timeout_ms = 120000;
  // Rank 0's state for a checkpoint (the user's dense model and optimizer,
  // as bytes). Null: checkpoints keep no trainer state.
  std::function<StatusOr<std::string>()> save_state;
  // Serve the C++ trainer's Prometheus metrics at
  // http://metrics_address:metrics_port/metrics (session_metrics.h). -1: off;
  // 0: any free port. Loopback by default, as the C++ trainer's: a trainer
  // listens nowhere else, so nothing says which interface a scraper uses.
  int metrics_port = -1;
  std::string metrics_address = "127.0.0.1";
  // Where this trainer's collective (data-parallel tables' gradient sums)
  // listens for its peers; "": the interface of the route to the master.
  std::string host;
};

class TrainerSession {
 public:
  // Registers and waits until the job starts (every member registered and
  // the shards exist).
  static StatusOr<std::unique_ptr<TrainerSession>> Open(const TrainerSessionOptions& options);
  ~TrainerSession();

  const JobConfig& job() const { return job_; }
  // The job's features in model order, and each one's embedding dim and
  // whether it is pooled (one row per bag) or not (one row per id).
  const std::vector<std::string>& features() const { return embeddings_->features(); }
  const std::vector<int>& dims() const { return dims_; }
  const std::vector<bool>& pooled() const { return pooled_; }
  // The step the next training lookup is (a resumed job's start at its
  // checkpoint's step), and the trainers' state saved with that checkpoint
  // ("" for a fresh job).
  int64_t step() const { return step_; }
  int64_t start_step() const { return start_step_; }
  const std::string& start_state() const { return start_state_; }
  int64_t generation() const { return generation_; }
  // Where the master asked the servers to dump their shards at the end, and
  // trainer 0 its dense model (tessera_master --dump_dir), or "".
  const std::string& dump_dir() const { return dump_dir_; }
  bool boundary_requested() const { return member_->checkpoint_requested()->load(); }
  // Several trainers stop for a boundary asked for (boundary_requested) at
  // the step they agree on, through their own collective (tessera.torch
  // does it over torch.distributed): the next training lookup stops there.
  void StopAtNextStep() { boundary_agreed_ = true; }
  int rank() const { return member_->rank(); }
  bool prefetched() const { return prefetched_; }
  int world() const { return member_->world(); }

  // Looks every feature of `kjt` up. Training (inference false): the next
  // step; its output gradients go back with Push. Inference: rows as they
  // are after every step so far, nothing created or opened.
  Status Lookup(const KeyedJaggedTensor& kjt, bool inference, FeatureOutputs* out);
  // Sends the lookup of the next step's batch now, so that its rows travel
  // while this step computes; the servers answer it once this step's own
  // update is applied (as training.prefetch in C++). The next
  // training Lookup must be of the same batch and gets them. Call it after
  // this step's Lookup. At a checkpoint boundary it sends nothing (the next
  // Lookup does, after the barrier).
  Status Prefetch(const KeyedJaggedTensor& kjt);
  // Sends d(loss)/d(output) of every feature of the last training lookup
  // (shapes as Lookup gave them, every value finite: else nothing is sent
  // and the step is still owed); the next Lookup or Finish waits for the
  // servers to take it, and if they refuse it the session is broken.
  Status Push(const FeatureGrads& grads);
  // Adds a step's summed loss over `examples` to the progress the master
  // shows and to the metrics' loss (optional).
  void RecordLoss(double loss_sum, int64_t examples);
  // The master's rendezvous store, for the program's own collectives (its
  // torch.distributed group: tessera.torch.Store): the job's trainers alone
  // reach it, over the job's keys. Keys are the program's (kept apart from
  // Tessera's own). StoreGet waits for the key up to `timeout`; StoreAdd
  // adds to a counter (0 when unset) and returns the new count.
  Status StoreSet(const std::string& key, std::string value);
  StatusOr<std::string> StoreGet(const std::string& key, std::chrono::milliseconds timeout);
  StatusOr<int64_t> StoreAdd(const std::string& key, int64_t delta);
  // Sums `data` over the job's trainers, in place, through the session's own
  // collective: the one its data-parallel tables use, sealed in a job with
  // keys (trainer/collective_seal.h). For the program's dense gradients
  // (tessera.torch.sealed_allreduce_hook, a DDP communication hook): then
  // they never cross torch's unsealed Gloo connections.
  //
  // Every trainer must sum the same sizes in the same order, so sums run in
  // the order of their tickets (TakeSumTicket), whichever thread runs them:
  // a hook takes its ticket in the backward, in program order, and sums on
  // a thread of its own while the backward goes on; the data-parallel
  // tables' sums take theirs at the push. Thread-safe (the rest of the
  // session is not). A failure (a peer gone, a message that does not open)
  // spends the collective: every later sum fails alike until a rollback
  // builds a new one.
  int64_t TakeSumTicket();
  Status AllReduceSum(std::span<float> data, int64_t ticket);
  // The metrics endpoint's URL, or "" when metrics_port was -1.
  std::string metrics_url() const { return metrics_->url(); }

  // After an error (a lookup, push or the user's own collective failed):
  // whether the job rolls back, and if so joining it. Waits for the master's
  // next generation (a lost server or trainer: up to the master's peer
  // timeout) and enters it: *followed is then true, and the session stands
  // at that generation's start step (the checkpoint's; step()), with
  // start_state() the trainers' state saved there, from which the caller
  // restores its model before training from step() again. Without a new
  // generation: *followed false, and the error that broke the session (OK
  // when nothing did: the caller's error was its own).
  Status FollowRollback(bool* followed);

  // Ends this trainer's part of the job: waits for the last push and
  // reports to the master (with `error` when not empty, and `eval`, the
  // evaluation's figures, when not null: the master's summary shows them).
  Status Finish(const std::string& error, const nlohmann::json& eval = nullptr);
  bool finished() const { return finished_; }

 private:
  TrainerSession() = default;
  // Keeps `st` when it broke the session (the job or a server failed, not
  // the caller's input): every later call returns it, Finish reports it.
  Status Keep(Status st);
  // Takes the generation `start` begins: its job, plan and servers. With
  // `restart` (joining, or a rollback), also its start: the data-parallel
  // tables and the trainers' state as its checkpoint saved them; without
  // (the servers changed at a boundary), the tables go on as they are.
  Status Enter(const TrainerMember::GenerationStart& start, bool restart);
  // The trainers' state for a checkpoint: the data-parallel tables' rows and
  // save_state's bytes, as one param file (common/param_file.h).
  StatusOr<std::string> SaveState();
  // After the step's push: its data-parallel rows' gradients, summed over
  // the trainers, through the tables' optimizers.
  Status StepLocalTables(const FeatureGrads& grads);
  // Opens collective_ when it is not (the first sum of a generation that
  // rolled back or began); the ranks meet in the master's store. REQUIRES:
  // the sums' turn (RunInTurn).
  Status OpenCollective();
  // Runs fn when every sum of an earlier ticket has run; the sums' state
  // (collective_, sum_failure_) is then fn's alone.
  Status RunInTurn(int64_t ticket, const std::function<Status()>& fn);
  // In `ticket`'s turn: sum(collective_), opened if need be; a failure
  // spends the collective (sum_failure_), and later sums fail alike.
  Status SumInTurn(int64_t ticket, const std::function<Status(Collective*)>& sum);
  // After a barrier at which the servers changed (`why`): joins the next
  // generation. One that starts at an earlier step is a rollback: entered,
  // and reported as an error until FollowRollback.
  Status FollowServerChange(const Status& why);
  // Enters `start`, a generation that may begin at an earlier step: what the
  // old one had in flight is dropped, the steps count from its start.
  Status EnterAt(const TrainerMember::GenerationStart& start);
  // Waits for the push of the last training step, which finishes it.
  Status CompleteStep();
  // Whether the next training step starts at a boundary (below).
  bool AtBoundary() const;
  // At a checkpoint boundary (checkpoint.every_steps, or asked for while
  // this is the job's only trainer): waits at the master's barrier, and
  // follows a change of the servers made there.
  Status MaybeCheckpoint();

  TrainerSessionOptions options_;
  std::unique_ptr<TrainerMember> member_;
  JobConfig job_;
  std::unique_ptr<EmbeddingClient> embeddings_;
  // Data-parallel tables, held here as the C++ trainer holds them, and the
  // collective that sums their gradients and AllReduceSum's (opened at the
  // first sum of a generation that rolled back or began).
  std::unique_ptr<DataParallelTables> local_;
  std::unique_ptr<MasterStore> store_;  // made at the first generation; kept
  std::unique_ptr<Collective> collective_;  // used in the sums' turn only
  Status sum_failure_;                      // likewise: the sum that spent collective_
  std::atomic<int64_t> next_ticket_{0};
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  int64_t turn_ = 0;         // GUARDED_BY(turn_mu_): the ticket whose sum may run
  bool turn_taken_ = false;  // GUARDED_BY(turn_mu_): and it runs
  KeyedJaggedTensor local_kjt_;  // the last training batch, for the tables' backward
  std::vector<int> dims_;
  std::vector<bool> pooled_;
  std::vector<int64_t> out_rows_;  // per feature, of the last training lookup
  int64_t generation_ = 0;
  int64_t start_step_ = 0;
  std::string start_state_;
  std::string dump_dir_;
  int64_t step_ = 0;
  bool push_owed_ = false;     // a training lookup whose gradients were not pushed
  bool push_pending_ = false;  // pushed, not yet waited for
  bool boundary_agreed_ = false;
  bool prefetched_ = false;    // the next step's lookup is in flight, of this batch:
  KeyedJaggedTensor prefetched_kjt_;
  bool finished_ = false;
  Status broken_;
  // A barrier found the job rolled back and entered the new generation;
  // FollowRollback reports it.
  bool rollback_entered_ = false;
  // Progress for the master and the final report.
  int64_t steps_ = 0;
  int64_t examples_ = 0;
  double window_loss_ = 0;
  int64_t window_examples_ = 0;
  double final_loss_ = 0;
  bool loss_recorded_ = false;
  std::chrono::steady_clock::time_point window_start_, run_start_;
  // examples/s counts after the first steps' warm-up, as the C++ trainer's.
  int64_t warmup_steps_ = 0;
  int64_t timed_examples_ = 0;
  std::chrono::steady_clock::time_point timed_start_;
  // The Prometheus figures and their endpoint; never null once open.
  std::unique_ptr<SessionMetrics> metrics_;
};

}  // namespace tessera
