#include "master/checkpoint_export.h"

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/param_file.h"
#include "common/sharding_plan.h"
#include "master/checkpoint_files.h"
#include "master/checkpoint_reader.h"
#include "master/table_export.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A dense layer in trainer/dlrm_model.cc's flat parameter layout: per layer,
// bottom then top, weight [out x in] then bias [out]. The export test checks
// it against the dense model a job dumps, so the two cannot drift apart.
struct DenseLayer {
  std::string name;
  int64_t in = 0, out = 0;
  bool relu = false;
  int64_t weight = 0, bias = 0;  // offsets in dense.params
};

std::vector<DenseLayer> DenseLayers(const ModelConfig& model, int64_t interaction_width, int64_t* total) {
  std::vector<DenseLayer> out;
  int64_t offset = 0;
  auto add = [&](const std::string& name, int64_t in, int64_t width, bool relu) {
    out.push_back({name, in, width, relu, offset, offset + in * width});
    offset += in * width + width;
  };
  int64_t width = model.num_dense_features;
  for (size_t i = 0; i < model.bottom_mlp.size(); ++i) {
    add("bottom." + std::to_string(i), width, model.bottom_mlp[i], true);
    width = model.bottom_mlp[i];
  }
  width = interaction_width;
  for (size_t i = 0; i < model.top_mlp.size(); ++i) {
    add("top." + std::to_string(i), width, model.top_mlp[i], i + 1 < model.top_mlp.size());
    width = model.top_mlp[i];
  }
  *total = offset;
  return out;
}

// OUT absent or empty, or with overwrite an earlier export (it has a
// model.json: never a folder of something else), emptied.
Status PrepareOut(const ExportOptions& o) {
  std::error_code ec;
  if (o.out.empty()) return Status::InvalidArgument("no output folder given");
  if (fs::exists(o.out, ec)) {
    if (!fs::is_directory(o.out, ec)) return Status::FailedPrecondition(o.out + " exists and is not a folder");
    if (!fs::is_empty(o.out, ec)) {
      if (!o.overwrite) {
        return Status::FailedPrecondition(o.out + " exists and is not empty: choose another folder or pass --overwrite");
      }
      if (!fs::exists(fs::path(o.out) / "model.json")) {
        return Status::FailedPrecondition(o.out + " is not an earlier export (no model.json): --overwrite only "
                                          "replaces one");
      }
      for (const auto& e : fs::directory_iterator(o.out, ec)) fs::remove_all(e.path(), ec);
      if (ec) return Status::Unavailable("cannot empty " + o.out + ": " + ec.message());
    }
  }
  fs::create_directories(o.out, ec);
  if (ec) return Status::Unavailable("cannot create " + o.out + ": " + ec.message());
  return Status::OK();
}

json Hashing(const JobConfig& job) {
  if (job.data.source == "criteo") {
    return {{"kind", "criteo_fnv1a64"},
            {"row", "FNV1a64(byte(column) ++ bytes(value)) mod num_embeddings; column: C1 = 0, C26 = 25; a "
                    "missing value is the empty string"},
            {"dense", "log(1 + max(I_j, 0)) in double, as float; missing: 0"}};
  }
  if (job.data.source == "csv") {
    // trainer/csv_source.h: each sparse column is a feature of its own name.
    return {{"kind", "csv_fnv1a64"},
            {"row", "FNV1a64(bytes(column name) ++ [0] ++ bytes(value)) mod num_embeddings; an empty value is the "
                    "empty string"},
            {"dense", "the column's number as float, log(1 + max(x, 0)) where the config says log1p"}};
  }
  return {{"kind", "identity"}, {"row", "ids are row numbers (" + job.data.source + " data)"}};
}

// Where a table's rows are: its shards' snapshots, or (data-parallel) the
// trainer state.
StatusOr<std::vector<RowSource>> SourcesOf(int t, const JobConfig& job, const ShardingPlan& plan,
                                           const CheckedManifest& checked, const std::vector<ParamArray>& state) {
  std::vector<RowSource> out;
  if (plan.tables[t].type == ShardingType::kDataParallel) {
    const std::string name = "dp." + job.tables[t].name + ".rows";
    const ParamArray* rows = FindParam(state, name);
    if (rows == nullptr) return Status::DataLoss("the trainer state lacks " + name);
    out.push_back({0, job.tables[t].num_embeddings, 0, job.tables[t].embedding_dim, "", rows, name});
    return out;
  }
  for (const ManifestShard& s : checked.shards) {
    if (s.spec.table != t) continue;
    out.push_back({s.spec.row_offset, s.spec.num_rows, s.spec.col_offset, s.spec.num_cols, s.path, nullptr,
                   "shard " + std::to_string(s.spec.shard_id)});
  }
  return out;
}

}  // namespace

StatusOr<ExportResult> ExportCheckpoint(const ExportOptions& o) {
  ExportResult result;
  TESSERA_ASSIGN_OR_RETURN(OpenedCheckpoint ckpt, OpenNewestCheckpoint(o.checkpoint, &result.passed_over));
  result.checkpoint_dir = ckpt.dir;
  result.step = ckpt.checked.step;
  const JobConfig& job = ckpt.job;
  auto plan = ShardingPlan::FromJson(ckpt.manifest["plan"]);
  if (!plan.ok()) return Status::DataLoss("checkpoint " + ckpt.dir + ": its plan: " + plan.status().message());
  auto state = DecodeParams(ckpt.trainer_state, "checkpoint " + ckpt.dir + " trainer state");
  if (!state.ok()) return state.status();
  TESSERA_RETURN_IF_ERROR(PrepareOut(o));

  // Tensors first, all of them: both formats write every header before data.
  std::vector<TableExport> tables;
  std::vector<TensorSpec> model_specs, opt_specs;
  std::vector<std::pair<size_t, size_t>> table_index;  // first model / optimizer tensor of each table
  for (size_t t = 0; t < job.tables.size(); ++t) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<RowSource> sources,
                             SourcesOf(static_cast<int>(t), job, *plan, ckpt.checked, *state));
    TESSERA_ASSIGN_OR_RETURN(TableExport e, TableExport::Create(job.tables[t], std::move(sources),
                                                                o.materialized_only, o.optimizer_state));
    TESSERA_RETURN_IF_ERROR(e.CountRows());
    table_index.emplace_back(model_specs.size(), opt_specs.size());
    for (TensorSpec& s : e.ModelTensors()) model_specs.push_back(std::move(s));
    if (o.optimizer_state) {
      for (TensorSpec& s : e.OptimizerTensors()) opt_specs.push_back(std::move(s));
    }
    tables.push_back(std::move(e));
  }
  // Python trainers bring their own dense model (its state is theirs, in
  // python.state, whatever the config's "model" says): the checkpoint holds
  // no dense model of Tessera's, as a job without a model does not.
  const bool our_model = job.has_model && FindParam(*state, "python.state") == nullptr;
  int64_t num_params = 0;
  const std::vector<DenseLayer> layers =
      our_model ? DenseLayers(job.model, job.InteractionWidth(), &num_params) : std::vector<DenseLayer>{};
  const ParamArray no_floats, no_steps = ParamArray::Ints("", 1, 1, {0});
  const ParamArray* params = our_model ? FindParam(*state, "dense.params") : &no_floats;
  const ParamArray* opt_state = our_model ? FindParam(*state, "dense.optimizer_state") : &no_floats;
  const ParamArray* opt_steps = our_model ? FindParam(*state, "dense.optimizer_steps") : &no_steps;
  if (params == nullptr || static_cast<int64_t>(params->f32.size()) != num_params || opt_state == nullptr ||
      opt_steps == nullptr || opt_steps->i64.size() != 1) {
    return Status::DataLoss("checkpoint " + ckpt.dir + ": its trainer state does not hold the dense model of its job (" +
                            std::to_string(num_params) + " parameters)");
  }
  const std::string dense_opt = our_model ? job.training.dense_optimizer.type : "sgd";
  const std::vector<std::string> dense_state = dense_opt == "adam"      ? std::vector<std::string>{"exp_avg", "exp_avg_sq"}
                                               : dense_opt == "adagrad" ? std::vector<std::string>{"sum"}
                                                                        : std::vector<std::string>{};
  if (static_cast<int64_t>(opt_state->f32.size()) != num_params * static_cast<int64_t>(dense_state.size())) {
    return Status::DataLoss("checkpoint " + ckpt.dir + ": the dense optimizer state has " +
                            std::to_string(opt_state->f32.size()) + " floats, " + dense_opt + " keeps " +
                            std::to_string(num_params * dense_state.size()));
  }
  // Every dense parameter (and state block) as (spec, offset in its array).
  std::vector<std::pair<int64_t, int64_t>> dense_model, dense_opt_parts;  // (offset, count)
  const size_t dense_model_first = model_specs.size(), dense_opt_first = opt_specs.size();
  for (int block = -1; block < static_cast<int>(dense_state.size()); ++block) {
    if (block >= 0 && !o.optimizer_state) break;
    auto& specs = block < 0 ? model_specs : opt_specs;
    auto& parts = block < 0 ? dense_model : dense_opt_parts;
    const std::string suffix = block < 0 ? "" : "." + dense_state[block];
    const int64_t base = block < 0 ? 0 : block * num_params;
    for (const DenseLayer& l : layers) {
      specs.push_back({l.name + ".weight" + suffix, TensorDtype::kF32, {l.out, l.in}});
      parts.emplace_back(base + l.weight, l.out * l.in);
      specs.push_back({l.name + ".bias" + suffix, TensorDtype::kF32, {l.out}});
      parts.emplace_back(base + l.bias, l.out);
    }
  }
  if (o.optimizer_state && dense_opt == "adam") opt_specs.push_back({"dense.step", TensorDtype::kI64, {}});

  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"tessera_checkpoint", ckpt.dir}, {"tessera_step", std::to_string(result.step)}};
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<TensorWriter> model,
                           TensorWriter::Create(o.format, o.out, "model", model_specs, metadata));
  std::unique_ptr<TensorWriter> optimizer;
  if (o.optimizer_state) {
    TESSERA_ASSIGN_OR_RETURN(optimizer, TensorWriter::Create(o.format, o.out, "optimizer", opt_specs, metadata));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    TESSERA_RETURN_IF_ERROR(tables[t].Write(model.get(), table_index[t].first, optimizer.get(), table_index[t].second,
                                            o.window_bytes));
  }
  for (size_t i = 0; i < dense_model.size(); ++i) {
    const auto [offset, count] = dense_model[i];
    TESSERA_RETURN_IF_ERROR(model->Write(dense_model_first + i, 0, params->f32.data() + offset, count));
  }
  for (size_t i = 0; i < dense_opt_parts.size(); ++i) {
    const auto [offset, count] = dense_opt_parts[i];
    TESSERA_RETURN_IF_ERROR(optimizer->Write(dense_opt_first + i, 0, opt_state->f32.data() + offset, count));
  }
  if (o.optimizer_state && dense_opt == "adam") {
    TESSERA_RETURN_IF_ERROR(optimizer->Write(opt_specs.size() - 1, 0, opt_steps->i64.data(), 1));
  }
  TESSERA_RETURN_IF_ERROR(model->Finish());
  if (optimizer) TESSERA_RETURN_IF_ERROR(optimizer->Finish());

  // model.json, last: its presence says the export is whole.
  json tensors = json::array();
  for (const TensorWriter* w : {model.get(), optimizer.get()}) {
    if (w == nullptr) continue;
    for (size_t i = 0; i < w->tensors().size(); ++i) {
      const TensorSpec& s = w->tensors()[i];
      tensors.push_back({{"name", s.name},
                         {"dtype", s.dtype == TensorDtype::kI64 ? "int64" : "float32"},
                         {"shape", s.shape},
                         {"file", w->FileOf(i)},
                         {"part", w == model.get() ? "model" : "optimizer"}});
      result.bytes += s.Bytes();
      ++result.tensors;
    }
  }
  const json job_json = job.ToJson();
  json tables_json = json::array();
  for (size_t t = 0; t < tables.size(); ++t) {
    json tj = job_json["tables"][t];
    tj.update(tables[t].Describe());
    tj["sharding"] = ShardingTypeName(plan->tables[t].type);
    tables_json.push_back(std::move(tj));
  }
  json layers_json = json::array();
  for (const DenseLayer& l : layers) {
    layers_json.push_back({{"name", l.name}, {"in", l.in}, {"out", l.out}, {"relu", l.relu},
                           {"weight", l.name + ".weight"}, {"bias", l.name + ".bias"}});
  }
  const json description = {
      {"export_version", 1},
      {"format", o.format == TensorFormat::kNpy ? "npy" : "safetensors"},
      {"checkpoint", ckpt.dir},
      {"step", result.step},
      {"job", job.name},
      {"optimizer_state", o.optimizer_state},
      {"materialized_only", o.materialized_only},
      {"tensors", tensors},
      {"tables", tables_json},
      {"features", {{"order", job.FeatureNames()}, {"source", job.data.source}, {"hashing", Hashing(job)}}},
      {"dense",
       {{"num_dense_features", job.model.num_dense_features},
        {"interaction", "concat: [bottom output, pooled embedding of each feature in features.order]"},
        {"interaction_width", job.InteractionWidth()},
        {"layers", layers_json},
        {"optimizer", job_json["training"]["dense_optimizer"]},
        {"optimizer_steps", opt_steps->i64[0]}}}};
  TESSERA_RETURN_IF_ERROR(WriteFileDurably(o.out + "/model.json", description.dump(2) + "\n"));
  return result;
}

}  // namespace tessera
