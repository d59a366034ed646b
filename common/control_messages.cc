#include "common/control_messages.h"

#include "common/json_fields.h"

namespace tessera {

using nlohmann::json;

namespace {

constexpr int64_t kMaxRank = 1 << 20;
constexpr int64_t kMaxI64 = INT64_MAX;

Status Role(const JsonFields& f, std::string* role) {
  TESSERA_RETURN_IF_ERROR(f.String("role", role, true));
  if (*role != "ps" && *role != "trainer") {
    return Status::InvalidArgument(f.PathOf("role") + ": must be \"ps\" or \"trainer\", got \"" + *role + "\"");
  }
  return Status::OK();
}

Status Rank(const JsonFields& f, const char* key, int* out) {
  int64_t v = 0;
  TESSERA_RETURN_IF_ERROR(f.Int(key, &v, true, 0, kMaxRank));
  *out = static_cast<int>(v);
  return Status::OK();
}

Status Trainer(const JsonFields& f, TrainerId* out) {
  TESSERA_RETURN_IF_ERROR(Rank(f, "rank", &out->rank));
  return f.Int("incarnation", &out->incarnation, true, 1, kMaxI64);
}

void Trainer(const TrainerId& t, json* j) {
  (*j)["rank"] = t.rank;
  (*j)["incarnation"] = t.incarnation;
}

}  // namespace

json RegisterRequest::ToJson() const {
  json j = {{"role", role}, {"host", host}, {"pid", pid}, {"generation", generation}};
  if (role == "ps") {
    j["endpoint"] = endpoint;
    j["memory_bytes"] = memory_bytes;
  } else {
    j["rank"] = rank;
    j["world"] = world;
  }
  return j;
}

StatusOr<RegisterRequest> RegisterRequest::Parse(const json& j) {
  JsonFields f(j, "REGISTER");
  RegisterRequest r;
  TESSERA_RETURN_IF_ERROR(Role(f, &r.role));
  TESSERA_RETURN_IF_ERROR(f.String("host", &r.host, false));
  TESSERA_RETURN_IF_ERROR(f.Int("pid", &r.pid, false, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, false, 0, kMaxI64));
  if (r.role == "ps") {
    TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"role", "host", "pid", "generation", "endpoint", "memory_bytes"}));
    TESSERA_RETURN_IF_ERROR(f.String("endpoint", &r.endpoint, true));
    if (r.endpoint.empty()) return Status::InvalidArgument("REGISTER.endpoint: must not be empty");
    TESSERA_RETURN_IF_ERROR(f.Int("memory_bytes", &r.memory_bytes, false, 0, kMaxI64));
  } else {
    TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"role", "host", "pid", "generation", "rank", "world"}));
    TESSERA_RETURN_IF_ERROR(Rank(f, "rank", &r.rank));
    int64_t world = 0;
    TESSERA_RETURN_IF_ERROR(f.Int("world", &world, true, 1, kMaxRank));
    r.world = static_cast<int>(world);
  }
  return r;
}

std::string RoutingIdToText(const std::string& routing_id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(routing_id.size() * 2);
  for (unsigned char c : routing_id) {
    text.push_back(kDigits[c >> 4]);
    text.push_back(kDigits[c & 15]);
  }
  return text;
}

StatusOr<std::string> RoutingIdFromText(const std::string& text) {
  if (text.empty() || text.size() % 2 != 0 || text.size() > 510) {
    return Status::InvalidArgument("a connection id must be 2-510 hex digits, got " + std::to_string(text.size()));
  }
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  std::string id;
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("a connection id must be lowercase hex");
    id.push_back(static_cast<char>(hi << 4 | lo));
  }
  return id;
}

json RegisterReply::ToJson() const {
  json j = {{"rank", rank},
            {"heartbeat_ms", heartbeat_ms},
            {"peer_timeout_ms", peer_timeout_ms},
            {"master_reconnect_ms", master_reconnect_ms},
            {"master_id", master_id}};
  if (incarnation > 0) j["incarnation"] = incarnation;
  if (!master_client.empty()) j["master_client"] = RoutingIdToText(master_client);
  return j;
}

StatusOr<RegisterReply> RegisterReply::Parse(const json& j) {
  JsonFields f(j, "REGISTER reply");
  RegisterReply r;
  TESSERA_RETURN_IF_ERROR(Rank(f, "rank", &r.rank));
  TESSERA_RETURN_IF_ERROR(f.Int("heartbeat_ms", &r.heartbeat_ms, true, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("peer_timeout_ms", &r.peer_timeout_ms, true, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("master_reconnect_ms", &r.master_reconnect_ms, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("master_id", &r.master_id, true, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("incarnation", &r.incarnation, false, 1, kMaxI64));
  std::string master_client;
  TESSERA_RETURN_IF_ERROR(f.String("master_client", &master_client, false));
  if (!master_client.empty()) {
    auto id = RoutingIdFromText(master_client);
    if (!id.ok()) return id.status().WithContext("REGISTER reply.master_client");
    r.master_client = *id;
  }
  return r;
}

json TrainerProgress::ToJson() const {
  json j{{"step", step},
         {"loss", loss},
         {"examples", examples},
         {"examples_per_s", examples_per_s},
         {"generation", generation}};
  if (epoch >= 0) j["epoch"] = epoch;
  if (total_steps > 0) j["total_steps"] = total_steps;
  return j;
}

json HeartbeatRequest::ToJson() const {
  json j = {{"role", role}, {"rank", rank}, {"master_id", master_id}};
  if (role == "trainer") {
    j["incarnation"] = incarnation;
    if (steps_done >= 0) j["steps_done"] = steps_done;
  }
  if (progress) j["progress"] = progress->ToJson();
  if (!stats.is_null()) j["stats"] = stats;
  return j;
}

StatusOr<HeartbeatRequest> HeartbeatRequest::Parse(const json& j) {
  JsonFields f(j, "HEARTBEAT");
  HeartbeatRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"role", "rank", "incarnation", "master_id", "steps_done", "progress", "stats"}));
  TESSERA_RETURN_IF_ERROR(Role(f, &r.role));
  TESSERA_RETURN_IF_ERROR(Rank(f, "rank", &r.rank));
  TESSERA_RETURN_IF_ERROR(f.Int("master_id", &r.master_id, false, 0, kMaxI64));
  if (r.role == "trainer") {
    TESSERA_RETURN_IF_ERROR(f.Int("incarnation", &r.incarnation, true, 1, kMaxI64));
    TESSERA_RETURN_IF_ERROR(f.Int("steps_done", &r.steps_done, false, 0, kMaxI64));
    const json* p = nullptr;
    TESSERA_RETURN_IF_ERROR(f.Object("progress", false, &p));
    if (p != nullptr) {
      JsonFields pf(*p, "HEARTBEAT.progress");
      TrainerProgress progress;
      TESSERA_RETURN_IF_ERROR(
          pf.OnlyKeys({"step", "loss", "examples", "examples_per_s", "generation", "epoch", "total_steps"}));
      TESSERA_RETURN_IF_ERROR(pf.Int("step", &progress.step, true, 0, kMaxI64));
      TESSERA_RETURN_IF_ERROR(pf.Float("loss", &progress.loss, true));
      TESSERA_RETURN_IF_ERROR(pf.Float("examples", &progress.examples, true));
      TESSERA_RETURN_IF_ERROR(pf.Float("examples_per_s", &progress.examples_per_s, true));
      TESSERA_RETURN_IF_ERROR(pf.Int("generation", &progress.generation, true, 0, kMaxI64));
      TESSERA_RETURN_IF_ERROR(pf.Int("epoch", &progress.epoch, false, 0, kMaxI64));
      TESSERA_RETURN_IF_ERROR(pf.Int("total_steps", &progress.total_steps, false, 1, kMaxI64));
      if (progress.examples < 0 || progress.examples_per_s < 0) {
        return Status::InvalidArgument("HEARTBEAT.progress: examples and examples_per_s must be >= 0");
      }
      r.progress = progress;
    }
  } else if (f.Has("progress") || f.Has("incarnation")) {
    return Status::InvalidArgument("HEARTBEAT: a server's heartbeat has no progress or incarnation");
  }
  if (const json* s = f.Get("stats")) {
    if (!s->is_object()) return Status::InvalidArgument("HEARTBEAT.stats: must be an object");
    r.stats = *s;
  }
  return r;
}

json HeartbeatReply::ToJson() const {
  json j = {{"state", state}, {"generation", generation}};
  if (!reason.empty()) j["reason"] = reason;
  if (checkpoint > 0) j["checkpoint"] = checkpoint;
  if (promoted) j["promoted"] = true;
  return j;
}

StatusOr<HeartbeatReply> HeartbeatReply::Parse(const json& j) {
  JsonFields f(j, "HEARTBEAT reply");
  HeartbeatReply r;
  TESSERA_RETURN_IF_ERROR(f.String("state", &r.state, true));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.String("reason", &r.reason, false));
  TESSERA_RETURN_IF_ERROR(f.Int("checkpoint", &r.checkpoint, false, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Bool("promoted", &r.promoted, false));
  return r;
}

json WaitStartRequest::ToJson() const {
  json j = {{"generation", generation}};
  Trainer(trainer, &j);
  return j;
}

StatusOr<WaitStartRequest> WaitStartRequest::Parse(const json& j) {
  JsonFields f(j, "WAIT_START");
  WaitStartRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"rank", "incarnation", "generation"}));
  TESSERA_RETURN_IF_ERROR(Trainer(f, &r.trainer));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, true, 0, kMaxI64));
  return r;
}

json StartInfo::ToJson() const {
  return json{{"job", job},
              {"plan", plan},
              {"ps_endpoints", ps_endpoints},
              {"dump_dir", dump_dir},
              {"start_step", start_step},
              {"generation", generation},
              {"promoted", promoted}};
}

StatusOr<StartInfo> StartInfo::Parse(const json& j) {
  JsonFields f(j, "WAIT_START reply");
  StartInfo r;
  const json* job = nullptr;
  const json* plan = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("job", true, &job));
  TESSERA_RETURN_IF_ERROR(f.Object("plan", true, &plan));
  r.job = *job;
  r.plan = *plan;
  TESSERA_RETURN_IF_ERROR(f.StringList("ps_endpoints", &r.ps_endpoints, true));
  if (r.ps_endpoints.empty()) return Status::InvalidArgument("WAIT_START reply.ps_endpoints: must not be empty");
  TESSERA_RETURN_IF_ERROR(f.String("dump_dir", &r.dump_dir, false));
  TESSERA_RETURN_IF_ERROR(f.Int("start_step", &r.start_step, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, true, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Bool("promoted", &r.promoted, false));
  return r;
}

json BarrierRequest::ToJson() const {
  json j = {{"step", step}, {"generation", generation}};
  Trainer(trainer, &j);
  return j;
}

StatusOr<BarrierRequest> BarrierRequest::Parse(const json& j) {
  JsonFields f(j, "CHECKPOINT_BARRIER");
  BarrierRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"rank", "incarnation", "step", "generation"}));
  TESSERA_RETURN_IF_ERROR(Trainer(f, &r.trainer));
  TESSERA_RETURN_IF_ERROR(f.Int("step", &r.step, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, true, 1, kMaxI64));
  return r;
}

json BarrierReply::ToJson() const { return json{{"action", action}, {"served", served}, {"generation", generation}}; }

StatusOr<BarrierReply> BarrierReply::Parse(const json& j) {
  JsonFields f(j, "CHECKPOINT_BARRIER reply");
  BarrierReply r;
  TESSERA_RETURN_IF_ERROR(f.String("action", &r.action, true));
  if (r.action != "continue" && r.action != "restart") {
    return Status::InvalidArgument("CHECKPOINT_BARRIER reply.action: must be continue or restart, got " + r.action);
  }
  TESSERA_RETURN_IF_ERROR(f.Int("served", &r.served, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("generation", &r.generation, true, 0, kMaxI64));
  return r;
}

StatusOr<ReportDone> ReportDone::Parse(const json& j) {
  JsonFields f(j, "REPORT_DONE");
  ReportDone r;
  TESSERA_RETURN_IF_ERROR(Trainer(f, &r.trainer));
  TESSERA_RETURN_IF_ERROR(f.Bool("ok", &r.ok, true));
  TESSERA_RETURN_IF_ERROR(f.String("error", &r.error, false));
  if (!r.ok && r.error.empty()) r.error = "unknown error";
  r.report = j;
  return r;
}

json Command::ToJson() const {
  json j = {{"command", command}};
  if (command == "remove_ps") j["ps"] = ps;
  if (!why.empty()) j["why"] = why;
  return j;
}

StatusOr<Command> Command::Parse(const json& j) {
  JsonFields f(j, "COMMAND");
  Command r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"command", "ps", "why"}));
  TESSERA_RETURN_IF_ERROR(f.String("command", &r.command, true));
  TESSERA_RETURN_IF_ERROR(f.String("why", &r.why, false));
  if (r.command == "remove_ps") {
    TESSERA_RETURN_IF_ERROR(Rank(f, "ps", &r.ps));
  } else if (r.command != "checkpoint") {
    return Status::InvalidArgument("COMMAND.command: unknown command '" + r.command + "' (known: checkpoint, remove_ps)");
  }
  return r;
}

const char* MigratePhaseName(MigratePhase phase) {
  switch (phase) {
    case MigratePhase::kAll:
      return "all";
    case MigratePhase::kPrecopy:
      return "precopy";
    case MigratePhase::kChanged:
      return "changed";
  }
  return "?";
}

json MigrateRequest::ToJson() const {
  std::vector<std::string> ids;
  for (const std::string& f : fetchers) ids.push_back(RoutingIdToText(f));
  return {{"phase", MigratePhaseName(phase)}, {"job", job}, {"plan", plan}, {"rank", rank}, {"step", step},
          {"from_version", from_version}, {"from_plan", from_plan}, {"sources", sources}, {"fetchers", ids}};
}

StatusOr<MigrateRequest> MigrateRequest::Parse(const json& j) {
  JsonFields f(j, "MIGRATE");
  MigrateRequest r;
  TESSERA_RETURN_IF_ERROR(
      f.OnlyKeys({"phase", "job", "plan", "rank", "step", "from_version", "from_plan", "sources", "fetchers"}));
  std::string phase = "all";
  TESSERA_RETURN_IF_ERROR(f.String("phase", &phase, false));
  if (phase == "all") {
    r.phase = MigratePhase::kAll;
  } else if (phase == "precopy") {
    r.phase = MigratePhase::kPrecopy;
  } else if (phase == "changed") {
    r.phase = MigratePhase::kChanged;
  } else {
    return Status::InvalidArgument("MIGRATE: phase '" + phase + "' is none of all, precopy, changed");
  }
  const json* object = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("job", true, &object));
  r.job = *object;
  TESSERA_RETURN_IF_ERROR(f.Object("plan", true, &object));
  r.plan = *object;
  int64_t rank = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("rank", &rank, true, -1, kMaxRank));
  r.rank = static_cast<int>(rank);
  TESSERA_RETURN_IF_ERROR(f.Int("step", &r.step, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("from_version", &r.from_version, true, 1, UINT32_MAX));
  TESSERA_RETURN_IF_ERROR(f.Object("from_plan", true, &object));
  r.from_plan = *object;
  TESSERA_RETURN_IF_ERROR(f.StringList("sources", &r.sources, true));
  std::vector<std::string> ids;
  TESSERA_RETURN_IF_ERROR(f.StringList("fetchers", &ids, true));
  for (const std::string& text : ids) {
    TESSERA_ASSIGN_OR_RETURN(std::string id, RoutingIdFromText(text));
    r.fetchers.push_back(std::move(id));
  }
  return r;
}

json FetchRowsRequest::ToJson() const {
  return {{"version", version}, {"shard", shard}, {"row_begin", row_begin}, {"row_end", row_end},
          {"after", after},     {"max_rows", max_rows}, {"changed", changed}};
}

StatusOr<FetchRowsRequest> FetchRowsRequest::Parse(const json& j) {
  JsonFields f(j, "FETCH_ROWS");
  FetchRowsRequest r;
  TESSERA_RETURN_IF_ERROR(
      f.OnlyKeys({"version", "shard", "row_begin", "row_end", "after", "max_rows", "changed"}));
  TESSERA_RETURN_IF_ERROR(f.Int("version", &r.version, true, 1, UINT32_MAX));
  TESSERA_RETURN_IF_ERROR(f.Int("shard", &r.shard, true, 0, UINT32_MAX));
  TESSERA_RETURN_IF_ERROR(f.Int("row_begin", &r.row_begin, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("row_end", &r.row_end, true, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("after", &r.after, true, -1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("max_rows", &r.max_rows, true, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Bool("changed", &r.changed, false));
  if (r.row_end < r.row_begin) {
    return Status::InvalidArgument("FETCH_ROWS: row_end " + std::to_string(r.row_end) + " < row_begin " +
                                   std::to_string(r.row_begin));
  }
  return r;
}

namespace {

json TrainersToJson(const std::vector<std::string>& trainers) {
  json ids = json::array();
  for (const std::string& t : trainers) ids.push_back(t.empty() ? std::string() : RoutingIdToText(t));
  return ids;
}

Status TrainersFromJson(const JsonFields& f, std::vector<std::string>* out) {
  std::vector<std::string> texts;
  TESSERA_RETURN_IF_ERROR(f.StringList("trainers", &texts, false));
  out->clear();
  for (const std::string& text : texts) {
    if (text.empty()) {
      out->emplace_back();  // a rank with no trainer now
      continue;
    }
    auto id = RoutingIdFromText(text);
    if (!id.ok()) return id.status().WithContext(f.PathOf("trainers"));
    out->push_back(std::move(id).value());
  }
  return Status::OK();
}

}  // namespace

json CreateShardsRequest::ToJson() const {
  json j = {{"job", job}, {"plan", plan}, {"trainers", TrainersToJson(trainers)}};
  if (rank >= 0) j["rank"] = rank;
  if (!dump_dir.empty()) j["dump_dir"] = dump_dir;
  if (!restore.is_null()) j["restore"] = restore;
  if (keep) j["keep"] = true;
  if (staged != 0) j["staged"] = staged;
  return j;
}

StatusOr<CreateShardsRequest> CreateShardsRequest::Parse(const json& j) {
  JsonFields f(j, "CREATE_SHARDS");
  CreateShardsRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"job", "plan", "rank", "trainers", "dump_dir", "restore", "keep", "staged"}));
  const json* object = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("job", true, &object));
  r.job = *object;
  TESSERA_RETURN_IF_ERROR(f.Object("plan", true, &object));
  r.plan = *object;
  int64_t rank = -1;
  TESSERA_RETURN_IF_ERROR(f.Int("rank", &rank, false, 0, kMaxRank));
  r.rank = static_cast<int>(rank);
  TESSERA_RETURN_IF_ERROR(TrainersFromJson(f, &r.trainers));
  TESSERA_RETURN_IF_ERROR(f.String("dump_dir", &r.dump_dir, false));
  if (f.Has("restore")) {
    TESSERA_RETURN_IF_ERROR(f.Object("restore", true, &object));
    r.restore = *object;
  }
  TESSERA_RETURN_IF_ERROR(f.Bool("keep", &r.keep, false));
  TESSERA_RETURN_IF_ERROR(f.Int("staged", &r.staged, false, 1, UINT32_MAX));
  return r;
}

json PromoteRequest::ToJson() const {
  return {{"plan", plan}, {"rank", rank}, {"trainers", TrainersToJson(trainers)}};
}

StatusOr<PromoteRequest> PromoteRequest::Parse(const json& j) {
  JsonFields f(j, "PROMOTE");
  PromoteRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"plan", "rank", "trainers"}));
  const json* object = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("plan", true, &object));
  r.plan = *object;
  int64_t rank = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("rank", &rank, true, 0, kMaxRank));
  r.rank = static_cast<int>(rank);
  TESSERA_RETURN_IF_ERROR(TrainersFromJson(f, &r.trainers));
  return r;
}

json SnapshotRequest::ToJson() const { return {{"dir", dir}, {"step", step}}; }

StatusOr<SnapshotRequest> SnapshotRequest::Parse(const json& j) {
  JsonFields f(j, "SNAPSHOT");
  SnapshotRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"dir", "step"}));
  TESSERA_RETURN_IF_ERROR(f.String("dir", &r.dir, true));
  TESSERA_RETURN_IF_ERROR(f.Int("step", &r.step, true, 0, kMaxI64));
  return r;
}

json DumpShardsRequest::ToJson() const { return {{"dir", dir}}; }

StatusOr<DumpShardsRequest> DumpShardsRequest::Parse(const json& j) {
  JsonFields f(j, "DUMP_SHARDS");
  DumpShardsRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"dir"}));
  TESSERA_RETURN_IF_ERROR(f.String("dir", &r.dir, true));
  return r;
}

json AbortRequest::ToJson() const { return {{"reason", reason}}; }

StatusOr<AbortRequest> AbortRequest::Parse(const json& j) {
  JsonFields f(j, "ABORT");
  AbortRequest r;
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"reason"}));
  r.reason = "job aborted by the master";
  TESSERA_RETURN_IF_ERROR(f.String("reason", &r.reason, false));
  return r;
}

}  // namespace tessera
