#include "master/checkpoint_manifest.h"

#include "common/json_fields.h"

namespace tessera {
namespace {

using nlohmann::json;

StatusOr<CheckedManifest> CheckManifestOrThrow(const json& manifest, const JobConfig& job) {
  // A manifest that does not parse is a damaged checkpoint (DATA_LOSS: an
  // older one may serve), not a wrong request.
  auto old_job = ParseJobConfigJson(manifest.at("job"), "");
  if (!old_job.ok()) return Status::DataLoss("its job: " + old_job.status().message());
  auto old_plan = ShardingPlan::FromJson(manifest.at("plan"));
  if (!old_plan.ok()) return Status::DataLoss("its plan: " + old_plan.status().message());
  // The tables must be the same tables; their placement may change.
  if (old_job->tables.size() != job.tables.size()) {
    return Status::FailedPrecondition("has " + std::to_string(old_job->tables.size()) + " tables, the job " +
                                      std::to_string(job.tables.size()));
  }
  for (size_t t = 0; t < job.tables.size(); ++t) {
    const TableConfig &a = old_job->tables[t], &b = job.tables[t];
    if (a.name != b.name || a.num_embeddings != b.num_embeddings || a.embedding_dim != b.embedding_dim ||
        a.optimizer.type != b.optimizer.type) {
      return Status::FailedPrecondition("table " + b.name + " differs from the checkpoint's table " + a.name +
                                        " (name, rows, dim and optimizer must match)");
    }
  }
  // Every shard of the plan once: a missing one would leave its rows at
  // their initial values without a word.
  CheckedManifest out;
  out.shards.resize(old_plan->shards.size());
  std::vector<bool> seen(old_plan->shards.size(), false);
  for (const json& s : manifest.at("shards")) {
    const uint32_t id = s.at("shard_id").get<uint32_t>();
    if (id >= old_plan->shards.size() || seen[id]) {
      return Status::DataLoss("shard " + std::to_string(id) + " is unknown to its plan or listed twice");
    }
    seen[id] = true;
    ManifestShard& shard = out.shards[id];
    shard.spec = old_plan->shards[id];
    shard.table = job.tables[shard.spec.table].name;
    shard.path = s.at("path").get<std::string>();
  }
  for (size_t id = 0; id < seen.size(); ++id) {
    if (!seen[id]) {
      return Status::DataLoss("its manifest lacks shard " + std::to_string(id) + " of table " +
                              job.tables[old_plan->shards[id].table].name);
    }
  }
  out.trainer_state = manifest.value("trainer_state", std::string("trainer.params"));
  out.step = manifest.at("step").get<int64_t>();
  return out;
}

}  // namespace

json MakeManifest(int64_t step, const json& job, const json& plan, json shards) {
  return json{{"format", 1},
              {"step", step},
              {"job", job},
              {"plan", plan},
              {"shards", std::move(shards)},
              {"trainer_state", "trainer.params"}};
}

StatusOr<json> ParseManifest(std::string_view text) {
  json j;
  if (!ParseJson(text, &j).ok() || !j.is_object()) {
    return Status::DataLoss("manifest.json is not valid JSON (truncated or damaged)");
  }
  if (!j.contains("step") || !j["step"].is_number_integer()) {
    return Status::DataLoss("manifest.json has no integer step");
  }
  return j;
}

StatusOr<CheckedManifest> CheckManifest(const json& manifest, const JobConfig& job) {
  try {
    return CheckManifestOrThrow(manifest, job);
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("malformed manifest: ") + e.what());
  }
}

}  // namespace tessera
