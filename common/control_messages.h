// Every control-plane message between the members of a job and its master,
// defined once: its fields, one ToJson and one Parse. Parse checks presence,
// types and ranges and names the field it refuses ("HEARTBEAT.rank: must be
// an integer, got \"0\""), so a handler never throws on a malformed body and
// a sender cannot misspell a field. The receiver checks meaning (a member it
// knows, a generation that runs). docs/wire_format.md mirrors this.
//
// The bodies travel as one JSON frame (messages.h: JsonMessage); a barrier
// and a start reply may carry the trainer state as a second frame.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera {

// A connection's routing id (binary, RpcClient::routing_id()) as JSON text:
// lowercase hex. FromText refuses anything that is not hex of 1-255 bytes.
std::string RoutingIdToText(const std::string& routing_id);
StatusOr<std::string> RoutingIdFromText(const std::string& text);

// REGISTER: a parameter server or a trainer joins (again, after its master
// was replaced: then with the generation it ran).
struct RegisterRequest {
  std::string role;  // "ps" or "trainer"
  std::string host;
  int64_t pid = 0;
  int64_t generation = 0;
  // A server's.
  std::string endpoint;
  int64_t memory_bytes = 0;
  // A trainer's.
  int rank = 0;
  int world = 0;

  nlohmann::json ToJson() const;
  static StatusOr<RegisterRequest> Parse(const nlohmann::json& j);
};

struct RegisterReply {
  int rank = 0;  // a server's member id; a trainer's rank
  int64_t heartbeat_ms = 0;
  int64_t peer_timeout_ms = 0;
  int64_t master_reconnect_ms = 0;
  int64_t master_id = 0;
  int64_t incarnation = 0;  // a trainer's registration (0 for a server)
  // The master's own client connection (its routing id), which alone may
  // send a server control requests; empty for a trainer.
  std::string master_client;

  nlohmann::json ToJson() const;
  static StatusOr<RegisterReply> Parse(const nlohmann::json& j);
};

// A trainer's report of the window of steps that ended at `step`.
struct TrainerProgress {
  int64_t step = 0;
  double loss = 0;
  double examples = 0;
  double examples_per_s = 0;
  int64_t generation = 0;
  int64_t epoch = -1;        // -1: not said
  int64_t total_steps = 0;   // the job's, as the trainer counts them; 0: not said

  nlohmann::json ToJson() const;
};

// HEARTBEAT: a member is alive (and a trainer's progress, a server's stats).
struct HeartbeatRequest {
  std::string role;  // "ps" or "trainer"
  int rank = 0;      // a server's member id; a trainer's rank
  int64_t incarnation = 0;
  int64_t master_id = 0;  // the master it registered with
  int64_t steps_done = -1;  // a trainer's steps finished in its generation; -1: none yet
  std::optional<TrainerProgress> progress;
  nlohmann::json stats;  // a server's counters (free form, for the summary)

  nlohmann::json ToJson() const;
  static StatusOr<HeartbeatRequest> Parse(const nlohmann::json& j);
};

struct HeartbeatReply {
  std::string state;  // waiting, running, recovering, done, aborted
  int64_t generation = 0;
  std::string reason;      // when aborted
  int64_t checkpoint = 0;  // a checkpoint request id not yet served; 0: none
  // The generation began by promoting backups (a server was lost, its
  // shards' backups serve them): trainers keep their step and re-route it.
  bool promoted = false;

  nlohmann::json ToJson() const;
  static StatusOr<HeartbeatReply> Parse(const nlohmann::json& j);
};

// Who a trainer's request comes from: its rank and its registration.
struct TrainerId {
  int rank = 0;
  int64_t incarnation = 0;
};

// WAIT_START: answered by the first generation newer than `generation`.
struct WaitStartRequest {
  TrainerId trainer;
  int64_t generation = 0;

  nlohmann::json ToJson() const;
  static StatusOr<WaitStartRequest> Parse(const nlohmann::json& j);
};

// The answer to WAIT_START (the trainer state, when starting from a
// checkpoint, follows as a second frame).
struct StartInfo {
  nlohmann::json job;   // JobConfig::ToJson
  nlohmann::json plan;  // ShardingPlan::ToJson
  std::vector<std::string> ps_endpoints;
  std::string dump_dir;
  int64_t start_step = 0;
  int64_t generation = 0;
  // Begun by promoting backups: a running trainer goes on with its step on
  // the new plan; start_step and the state are those of the generation's
  // restore point, for a trainer that starts afresh.
  bool promoted = false;

  nlohmann::json ToJson() const;
  static StatusOr<StartInfo> Parse(const nlohmann::json& j);
};

// CHECKPOINT_BARRIER: a trainer waits at a step boundary (trainer 0 adds its
// state as a second frame).
struct BarrierRequest {
  TrainerId trainer;
  int64_t step = 0;
  int64_t generation = 0;

  nlohmann::json ToJson() const;
  static StatusOr<BarrierRequest> Parse(const nlohmann::json& j);
};

struct BarrierReply {
  std::string action;  // "continue", or "restart": the servers changed here
  int64_t served = 0;  // the newest checkpoint request served
  int64_t generation = 0;

  nlohmann::json ToJson() const;
  static StatusOr<BarrierReply> Parse(const nlohmann::json& j);
};

// REPORT_DONE: a trainer ended. `report` is the whole body (steps, losses,
// eval: kept for the job summary).
struct ReportDone {
  TrainerId trainer;
  bool ok = false;
  std::string error;
  nlohmann::json report;

  static StatusOr<ReportDone> Parse(const nlohmann::json& j);
};

// COMMAND: an operator's request to the master.
struct Command {
  std::string command;  // "checkpoint" or "remove_ps"
  int ps = -1;          // remove_ps: the server's member id
  std::string why;

  nlohmann::json ToJson() const;
  static StatusOr<Command> Parse(const nlohmann::json& j);
};

// MIGRATE (master -> every server of the old and the new plan, at a step
// boundary where the servers change): build the shards `plan` gives this
// server that it does not hold already by fetching their rows, optimizer
// state included, from the servers of the running plan (FETCH_ROWS), and
// serve such fetches to the others. Nothing served changes: the new shards
// are staged until CREATE_SHARDS {staged: plan.version} puts them in
// place. Answered once this server's rows are all in.
// The orders the master gives a parameter server besides MIGRATE
// (docs/wire_format.md). Trainers' connections travel as routing ids in hex
// text, "" for a rank no trainer holds now; structs hold the raw ids.

// CREATE_SHARDS: take the shards `plan` gives the server at `rank`,
// restored from a checkpoint's `restore` (its manifest) or from a finished
// migration (`staged`: the plan version it staged), keeping what it holds
// already with `keep`; serve only `trainers`; DUMP_SHARDS only into
// `dump_dir`.
struct CreateShardsRequest {
  nlohmann::json job;   // JobConfig::ToJson
  nlohmann::json plan;  // ShardingPlan::ToJson
  int rank = -1;        // -1: not given (the server keeps the rank it has)
  std::vector<std::string> trainers;
  std::string dump_dir;
  nlohmann::json restore;  // an object, or null: none
  bool keep = false;
  int64_t staged = 0;  // 0: none

  nlohmann::json ToJson() const;
  static StatusOr<CreateShardsRequest> Parse(const nlohmann::json& j);
};

// PROMOTE: follow `plan` (backups serving a lost server's shards) as rank
// `rank`, keeping every shard and its state.
struct PromoteRequest {
  nlohmann::json plan;
  int rank = 0;
  std::vector<std::string> trainers;

  nlohmann::json ToJson() const;
  static StatusOr<PromoteRequest> Parse(const nlohmann::json& j);
};

// SNAPSHOT: write the shards as of the end of step `step` into `dir`.
struct SnapshotRequest {
  std::string dir;
  int64_t step = 0;

  nlohmann::json ToJson() const;
  static StatusOr<SnapshotRequest> Parse(const nlohmann::json& j);
};

// DUMP_SHARDS: write every shard's rows (for comparing runs) into `dir`.
struct DumpShardsRequest {
  std::string dir;

  nlohmann::json ToJson() const;
  static StatusOr<DumpShardsRequest> Parse(const nlohmann::json& j);
};

// ABORT: the job ends; `reason` goes to the server's log.
struct AbortRequest {
  std::string reason;

  nlohmann::json ToJson() const;
  static StatusOr<AbortRequest> Parse(const nlohmann::json& j);
};

// What a MIGRATE moves. kAll: every row the new plan gives a server that it
// does not hold, at a step boundary. kPrecopy: the same, while training goes
// on: the sources remember which rows change from then on. kChanged: at a
// boundary after a kPrecopy to the same plan, only those rows again.
enum class MigratePhase { kAll, kPrecopy, kChanged };
const char* MigratePhaseName(MigratePhase phase);

struct MigrateRequest {
  MigratePhase phase = MigratePhase::kAll;
  nlohmann::json job;   // JobConfig::ToJson
  nlohmann::json plan;  // the new ShardingPlan::ToJson
  int rank = 0;         // this server's rank in the new plan; -1: none (it leaves)
  int64_t step = 0;     // the boundary: every push of the steps before it is applied first
  int64_t from_version = 0;            // the running plan's version
  nlohmann::json from_plan;            // the running plan (ShardingPlan::ToJson)
  std::vector<std::string> sources;    // its servers' endpoints, by rank
  std::vector<std::string> fetchers;   // connections (routing ids) that may fetch rows

  nlohmann::json ToJson() const;
  static StatusOr<MigrateRequest> Parse(const nlohmann::json& j);
};

// FETCH_ROWS (server -> server during a migration): the rows with id in
// [row_begin, row_end) (only those changed since the precopy, with changed)
// and > after of shard `shard` of plan `version`, in id
// order, at most max_rows. The reply (messages.h: FetchRowsReply) says the
// id to ask after next, or -1 when the range is done.
struct FetchRowsRequest {
  int64_t version = 0;
  int64_t shard = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t after = -1;
  int64_t max_rows = 0;
  bool changed = false;  // only rows updated since the precopy began (MigratePhase::kChanged)

  nlohmann::json ToJson() const;
  static StatusOr<FetchRowsRequest> Parse(const nlohmann::json& j);
};

}  // namespace tessera
