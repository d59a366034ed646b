#include "master/checkpoint_manifest.h"

#include <cstdint>

#include "common/json_fields.h"

namespace tessera {
namespace {

using nlohmann::json;

// A manifest that does not parse is a damaged checkpoint (DATA_LOSS: an
// older one may serve), not a wrong request.
Status Damaged(const Status& st) { return st.ok() ? st : Status::DataLoss(st.message()); }

// The tables must be the same tables; their placement may change.
Status SameTables(const JobConfig& old_job, const JobConfig& job) {
  if (old_job.tables.size() != job.tables.size()) {
    return Status::FailedPrecondition("has " + std::to_string(old_job.tables.size()) + " tables, the job " +
                                      std::to_string(job.tables.size()));
  }
  for (size_t t = 0; t < job.tables.size(); ++t) {
    const TableConfig &a = old_job.tables[t], &b = job.tables[t];
    if (a.name != b.name || a.num_embeddings != b.num_embeddings || a.embedding_dim != b.embedding_dim ||
        a.optimizer.type != b.optimizer.type) {
      return Status::FailedPrecondition("table " + b.name + " differs from the checkpoint's table " + a.name +
                                        " (name, rows, dim and optimizer must match)");
    }
  }
  return Status::OK();
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
  JsonFields f(manifest, "manifest");
  CheckedManifest out;
  TESSERA_RETURN_IF_ERROR(Damaged(f.Int("step", &out.step, true, 0, INT64_MAX)));
  const json* job_json = nullptr;
  TESSERA_RETURN_IF_ERROR(Damaged(f.Object("job", true, &job_json)));
  auto old_job = ParseJobConfigJson(*job_json, "");
  if (!old_job.ok()) return Status::DataLoss("its job: " + old_job.status().message());
  const json* plan_json = nullptr;
  TESSERA_RETURN_IF_ERROR(Damaged(f.Object("plan", true, &plan_json)));
  auto old_plan = ShardingPlan::FromJson(*plan_json);
  if (!old_plan.ok()) return Status::DataLoss("its plan: " + old_plan.status().message());
  const Status fits = old_plan->FitsJob(*old_job);
  if (!fits.ok()) return Status::DataLoss("its plan is not one for its job: " + fits.message());
  TESSERA_RETURN_IF_ERROR(SameTables(*old_job, job));

  // Every shard of the plan once: a missing one would leave its rows at
  // their initial values without a word.
  const json* shards = f.Get("shards");
  if (shards == nullptr || !shards->is_array()) return Status::DataLoss("manifest.shards: required list is missing");
  out.shards.resize(old_plan->shards.size());
  std::vector<bool> seen(old_plan->shards.size(), false);
  for (size_t i = 0; i < shards->size(); ++i) {
    JsonFields sf((*shards)[i], "manifest.shards[" + std::to_string(i) + "]");
    int64_t id = 0;
    std::string path;
    TESSERA_RETURN_IF_ERROR(Damaged(sf.Int("shard_id", &id, true, 0, UINT32_MAX)));
    TESSERA_RETURN_IF_ERROR(Damaged(sf.String("path", &path, true)));
    if (id >= static_cast<int64_t>(seen.size()) || seen[id]) {
      return Status::DataLoss("shard " + std::to_string(id) + " is unknown to its plan or listed twice");
    }
    seen[id] = true;
    ManifestShard& shard = out.shards[id];
    shard.spec = old_plan->shards[id];
    shard.table = job.tables[shard.spec.table].name;
    shard.path = std::move(path);
    const json* files = nullptr;
    TESSERA_RETURN_IF_ERROR(Damaged(sf.Object("files", false, &files)));
    if (files != nullptr) {
      JsonFields ff(*files, "manifest.shards[" + std::to_string(i) + "].files");
      for (auto it = files->begin(); it != files->end(); ++it) {
        int64_t bytes = 0;
        TESSERA_RETURN_IF_ERROR(Damaged(ff.Int(it.key().c_str(), &bytes, true, 0, INT64_MAX)));
        if (it.key().empty() || it.key().find('/') != std::string::npos || it.key() == "..") {
          return Status::DataLoss("manifest.shards[" + std::to_string(i) + "].files: \"" + it.key() +
                                  "\" is not a file name");
        }
        shard.files.emplace_back(it.key(), bytes);
      }
    }
  }
  for (size_t id = 0; id < seen.size(); ++id) {
    if (!seen[id]) {
      return Status::DataLoss("its manifest lacks shard " + std::to_string(id) + " of table " +
                              job.tables[old_plan->shards[id].table].name);
    }
  }
  out.trainer_state = "trainer.params";
  TESSERA_RETURN_IF_ERROR(Damaged(f.String("trainer_state", &out.trainer_state, false)));
  if (out.trainer_state.empty() || out.trainer_state.find('/') != std::string::npos) {
    return Status::DataLoss("manifest.trainer_state: must name a file in the checkpoint's folder, got \"" +
                            out.trainer_state + "\"");
  }
  if (f.Has("trainer_state_checksum")) {
    const json* sum = f.Get("trainer_state_checksum");
    if (!sum->is_number_unsigned() && !(sum->is_number_integer() && sum->get<int64_t>() >= 0)) {
      return Status::DataLoss("manifest.trainer_state_checksum: must be an unsigned integer");
    }
    out.trainer_state_checksum = sum->get<uint64_t>();
    TESSERA_RETURN_IF_ERROR(Damaged(f.Int("trainer_state_bytes", &out.trainer_state_bytes, true, 0, INT64_MAX)));
    out.trainer_state_summed = true;
  }
  return out;
}

}  // namespace tessera
