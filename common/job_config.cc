#include "common/job_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace tessera {
namespace {

using nlohmann::json;
constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
// Server ids fit an int; a plan numbers servers below this.
constexpr int64_t kMaxPs = 1 << 20;
// Wider than any dense layer a trainer could hold; bounds the widths summed
// into the interaction (InteractionWidth) well inside an int64.
constexpr int64_t kMaxLayerWidth = 1 << 20;

const char* const kOptimizers[] = {"sgd", "adagrad", "rowwise_adagrad", "adam"};
const char* const kShardingTypes[] = {"table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"};

template <size_t N>
bool OneOf(const std::string& s, const char* const (&names)[N]) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

template <size_t N>
std::string Join(const char* const (&names)[N]) {
  std::string out;
  for (const char* n : names) out += out.empty() ? n : std::string(", ") + n;
  return out;
}

uint64_t HashName(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h & 0x7fffffffffffffffULL;  // stays a non-negative JSON integer
}

Status ParseOptimizer(const json& j, const std::string& path, OptimizerSpec* out) {
  JsonFields f(j, path);
  TESSERA_RETURN_IF_ERROR(
      f.OnlyKeys({"type", "lr", "eps", "beta1", "beta2", "weight_decay", "initial_accumulator"}));
  TESSERA_RETURN_IF_ERROR(f.String("type", &out->type, false));
  if (!OneOf(out->type, kOptimizers)) {
    return Status::InvalidArgument(f.PathOf("type") + ": unknown optimizer '" + out->type + "' (known: " +
                                   Join(kOptimizers) + ")");
  }
  TESSERA_RETURN_IF_ERROR(f.Float("lr", &out->lr, false));
  TESSERA_RETURN_IF_ERROR(f.Float("eps", &out->eps, false));
  TESSERA_RETURN_IF_ERROR(f.Float("beta1", &out->beta1, false));
  TESSERA_RETURN_IF_ERROR(f.Float("beta2", &out->beta2, false));
  TESSERA_RETURN_IF_ERROR(f.Float("weight_decay", &out->weight_decay, false));
  TESSERA_RETURN_IF_ERROR(f.Float("initial_accumulator", &out->initial_accumulator, false));
  if (out->lr < 0) return Status::InvalidArgument(f.PathOf("lr") + ": must be >= 0");
  if (out->eps <= 0) return Status::InvalidArgument(f.PathOf("eps") + ": must be > 0");
  if (out->beta1 < 0 || out->beta1 >= 1 || out->beta2 < 0 || out->beta2 >= 1) {
    return Status::InvalidArgument(path + ": beta1 and beta2 must be in [0, 1)");
  }
  if (out->initial_accumulator < 0) return Status::InvalidArgument(f.PathOf("initial_accumulator") + ": must be >= 0");
  return Status::OK();
}

json OptimizerToJson(const OptimizerSpec& o) {
  return json{{"type", o.type},   {"lr", o.lr},
              {"eps", o.eps},     {"beta1", o.beta1},
              {"beta2", o.beta2}, {"weight_decay", o.weight_decay},
              {"initial_accumulator", o.initial_accumulator}};
}

Status ParseInitializer(const json& j, const std::string& path, InitializerSpec* out) {
  JsonFields f(j, path);
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"type", "low", "high", "mean", "std"}));
  TESSERA_RETURN_IF_ERROR(f.String("type", &out->type, false));
  if (out->type != "uniform" && out->type != "normal" && out->type != "zeros") {
    return Status::InvalidArgument(f.PathOf("type") + ": unknown initializer '" + out->type +
                                   "' (known: uniform, normal, zeros)");
  }
  TESSERA_RETURN_IF_ERROR(f.Float("low", &out->low, false));
  TESSERA_RETURN_IF_ERROR(f.Float("high", &out->high, false));
  TESSERA_RETURN_IF_ERROR(f.Float("mean", &out->mean, false));
  TESSERA_RETURN_IF_ERROR(f.Float("std", &out->std, false));
  if (out->type == "uniform" && !(out->low <= out->high)) {
    return Status::InvalidArgument(path + ": uniform initializer needs low <= high");
  }
  if (out->type == "normal" && out->std < 0) return Status::InvalidArgument(f.PathOf("std") + ": must be >= 0");
  return Status::OK();
}

Status ParsePooling(const std::string& s, const std::string& path, PoolingType* out) {
  if (s == "SUM" || s == "sum") {
    *out = PoolingType::kSum;
  } else if (s == "MEAN" || s == "mean") {
    *out = PoolingType::kMean;
  } else if (s == "NONE" || s == "none") {
    *out = PoolingType::kNone;
  } else {
    return Status::InvalidArgument(path + ": unknown pooling '" + s + "' (known: SUM, MEAN, NONE)");
  }
  return Status::OK();
}

Status ParseTable(const json& j, const std::string& path, const TrainingConfig& training, TableConfig* t) {
  JsonFields f(j, path);
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"name", "num_embeddings", "embedding_dim", "feature_names", "pooling",
                                      "optimizer", "initializer", "seed", "sharding_type", "constraints"}));
  TESSERA_RETURN_IF_ERROR(f.String("name", &t->name, true));
  if (t->name.empty()) return Status::InvalidArgument(f.PathOf("name") + ": must not be empty");
  TESSERA_RETURN_IF_ERROR(f.Int("num_embeddings", &t->num_embeddings, true, 1, kMaxI64));
  int64_t dim = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("embedding_dim", &dim, true, 1, 1 << 16));
  t->embedding_dim = static_cast<int>(dim);
  TESSERA_RETURN_IF_ERROR(f.StringList("feature_names", &t->feature_names, true));
  if (t->feature_names.empty()) return Status::InvalidArgument(f.PathOf("feature_names") + ": needs at least one");
  std::string pooling = "SUM";
  TESSERA_RETURN_IF_ERROR(f.String("pooling", &pooling, false));
  TESSERA_RETURN_IF_ERROR(ParsePooling(pooling, f.PathOf("pooling"), &t->pooling));
  t->optimizer = training.sparse_optimizer;
  if (const json* o = f.Get("optimizer")) TESSERA_RETURN_IF_ERROR(ParseOptimizer(*o, f.PathOf("optimizer"), &t->optimizer));
  if (const json* i = f.Get("initializer")) {
    TESSERA_RETURN_IF_ERROR(ParseInitializer(*i, f.PathOf("initializer"), &t->initializer));
  }
  int64_t seed = -1;
  TESSERA_RETURN_IF_ERROR(f.Int("seed", &seed, false, 0, kMaxI64));
  t->seed = seed >= 0 ? static_cast<uint64_t>(seed) : HashName(training.seed, t->name);
  TESSERA_RETURN_IF_ERROR(f.String("sharding_type", &t->sharding_type, false));
  if (!t->sharding_type.empty() && !OneOf(t->sharding_type, kShardingTypes)) {
    return Status::InvalidArgument(f.PathOf("sharding_type") + ": unknown sharding type '" + t->sharding_type +
                                   "' (known: " + Join(kShardingTypes) + ")");
  }
  if (const json* c = f.Get("constraints")) {
    JsonFields cf(*c, f.PathOf("constraints"));
    PlanConstraints& pc = t->constraints;
    TESSERA_RETURN_IF_ERROR(cf.OnlyKeys(
        {"sharding_types", "ps", "min_shards", "max_shards", "pooling_factor", "id_frequency_sample"}));
    TESSERA_RETURN_IF_ERROR(cf.StringList("sharding_types", &pc.sharding_types, false));
    for (const std::string& type : pc.sharding_types) {
      if (!OneOf(type, kShardingTypes)) {
        return Status::InvalidArgument(cf.PathOf("sharding_types") + ": unknown sharding type '" + type + "'");
      }
    }
    std::vector<int64_t> ps;
    TESSERA_RETURN_IF_ERROR(cf.IntList("ps", &ps, false, 0, kMaxPs));
    pc.ps.assign(ps.begin(), ps.end());
    int64_t lo = 0, hi = 0;
    TESSERA_RETURN_IF_ERROR(cf.Int("min_shards", &lo, false, 0, 1 << 20));
    TESSERA_RETURN_IF_ERROR(cf.Int("max_shards", &hi, false, 0, 1 << 20));
    if (hi > 0 && lo > hi) return Status::InvalidArgument(cf.PathOf("min_shards") + ": exceeds max_shards");
    pc.min_shards = static_cast<int>(lo);
    pc.max_shards = static_cast<int>(hi);
    TESSERA_RETURN_IF_ERROR(cf.Float("pooling_factor", &pc.pooling_factor, false));
    if (pc.pooling_factor < 0) return Status::InvalidArgument(cf.PathOf("pooling_factor") + ": must be >= 0");
    TESSERA_RETURN_IF_ERROR(cf.IntList("id_frequency_sample", &pc.id_frequency_sample, false, 0, kMaxI64));
    for (int64_t id : pc.id_frequency_sample) {
      if (id >= t->num_embeddings) {
        return Status::InvalidArgument(cf.PathOf("id_frequency_sample") + ": id " + std::to_string(id) +
                                       " is not a row of the table");
      }
    }
  }
  if (!t->sharding_type.empty() && !t->constraints.sharding_types.empty() &&
      !std::count(t->constraints.sharding_types.begin(), t->constraints.sharding_types.end(), t->sharding_type)) {
    return Status::InvalidArgument(f.PathOf("sharding_type") + ": '" + t->sharding_type +
                                   "' is not among constraints.sharding_types");
  }
  return Status::OK();
}

const char* const kCsvKeys[] = {"delimiter", "header", "eval_header", "columns", "label", "dense", "sparse",
                                 "eval_fraction"};

// The "csv" source's keys of `data` (f), into *c. Each column a key names
// must be among `columns` when that is given; the file's header is checked
// when the file is opened.
Status ParseCsvData(const JsonFields& f, bool has_eval_path, CsvDataConfig* c) {
  std::string delimiter(1, c->delimiter);
  TESSERA_RETURN_IF_ERROR(f.String("delimiter", &delimiter, false));
  if (delimiter.size() != 1 || delimiter == "\n" || delimiter == "\r" || delimiter == "\"") {
    return Status::InvalidArgument(f.PathOf("delimiter") + ": must be one character such as \",\" or \"\\t\", got \"" +
                                   delimiter + "\"");
  }
  c->delimiter = delimiter[0];
  TESSERA_RETURN_IF_ERROR(f.Bool("header", &c->header, false));
  c->eval_header = c->header;
  TESSERA_RETURN_IF_ERROR(f.Bool("eval_header", &c->eval_header, false));
  TESSERA_RETURN_IF_ERROR(f.StringList("columns", &c->columns, false));
  if (c->columns.empty() && (!c->header || (has_eval_path && !c->eval_header))) {
    return Status::InvalidArgument(f.PathOf("columns") + ": required when a file has no header line (data.header "
                                   "or data.eval_header is false)");
  }
  std::set<std::string> known;
  for (const std::string& name : c->columns) {
    if (name.empty() || !known.insert(name).second) {
      return Status::InvalidArgument(f.PathOf("columns") + ": column '" + name + "' is empty or listed twice");
    }
  }
  auto check_known = [&](const std::string& path, const std::string& name) {
    if (name.empty()) return Status::InvalidArgument(path + ": must not be empty");
    if (!c->columns.empty() && !known.count(name)) {
      return Status::InvalidArgument(path + ": column '" + name + "' is not among data.columns");
    }
    return Status::OK();
  };

  const json* label = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("label", true, &label));
  JsonFields lf(*label, f.PathOf("label"));
  TESSERA_RETURN_IF_ERROR(lf.OnlyKeys({"column", "threshold"}));
  TESSERA_RETURN_IF_ERROR(lf.String("column", &c->label_column, true));
  TESSERA_RETURN_IF_ERROR(check_known(lf.PathOf("column"), c->label_column));
  c->has_label_threshold = lf.Has("threshold");
  TESSERA_RETURN_IF_ERROR(lf.Float("threshold", &c->label_threshold, false));

  std::set<std::string> used = {c->label_column};
  if (const json* dense = f.Get("dense")) {
    if (!dense->is_array()) return Status::InvalidArgument(f.PathOf("dense") + ": must be a list");
    for (size_t i = 0; i < dense->size(); ++i) {
      const std::string path = f.PathOf("dense") + "[" + std::to_string(i) + "]";
      CsvDenseColumn col;
      if ((*dense)[i].is_string()) {
        col.column = (*dense)[i].get<std::string>();
      } else {
        JsonFields df((*dense)[i], path);
        TESSERA_RETURN_IF_ERROR(df.OnlyKeys({"column", "log1p"}));
        TESSERA_RETURN_IF_ERROR(df.String("column", &col.column, true));
        TESSERA_RETURN_IF_ERROR(df.Bool("log1p", &col.log1p, false));
      }
      TESSERA_RETURN_IF_ERROR(check_known(path, col.column));
      if (!used.insert(col.column).second) {
        return Status::InvalidArgument(path + ": column '" + col.column + "' is already the label or a dense column");
      }
      c->dense.push_back(col);
    }
  }
  TESSERA_RETURN_IF_ERROR(f.StringList("sparse", &c->sparse, true));
  std::set<std::string> sparse;
  for (size_t i = 0; i < c->sparse.size(); ++i) {
    const std::string path = f.PathOf("sparse") + "[" + std::to_string(i) + "]";
    TESSERA_RETURN_IF_ERROR(check_known(path, c->sparse[i]));
    if (c->sparse[i] == c->label_column || !sparse.insert(c->sparse[i]).second) {
      return Status::InvalidArgument(path + ": column '" + c->sparse[i] + "' is the label or listed twice");
    }
  }
  TESSERA_RETURN_IF_ERROR(f.Float("eval_fraction", &c->eval_fraction, false));
  if (!(c->eval_fraction >= 0 && c->eval_fraction < 1)) {
    return Status::InvalidArgument(f.PathOf("eval_fraction") + ": must be in [0, 1)");
  }
  if (c->eval_fraction > 0 && has_eval_path) {
    return Status::InvalidArgument(f.PathOf("eval_fraction") + ": give data.eval_path or data.eval_fraction, not both");
  }
  return Status::OK();
}

Status ParseData(const json& j, DataConfig* d, const std::string& base_dir) {
  JsonFields f(j, "data");
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"source", "path", "eval_path", "fallback_to_synthetic", "max_examples",
                                      "num_examples", "ids_per_bag", "zipf", "labels", "weighted", "delimiter",
                                      "header", "eval_header", "columns", "label", "dense", "sparse",
                                      "eval_fraction"}));
  TESSERA_RETURN_IF_ERROR(f.String("source", &d->source, true));
  if (d->source != "criteo" && d->source != "csv" && d->source != "synthetic") {
    return Status::InvalidArgument("data.source: unknown source '" + d->source + "' (known: criteo, csv, synthetic)");
  }
  TESSERA_RETURN_IF_ERROR(f.String("path", &d->path, d->source != "synthetic"));
  TESSERA_RETURN_IF_ERROR(f.String("eval_path", &d->eval_path, false));
  if (d->source == "csv") {
    TESSERA_RETURN_IF_ERROR(ParseCsvData(f, !d->eval_path.empty(), &d->csv));
  } else {
    for (const char* key : kCsvKeys) {
      if (f.Has(key)) return Status::InvalidArgument(f.PathOf(key) + ": only for data.source 'csv'");
    }
  }
  auto resolve = [&](std::string* p) {
    if (!p->empty() && std::filesystem::path(*p).is_relative() && !base_dir.empty()) {
      *p = (std::filesystem::path(base_dir) / *p).lexically_normal().string();
    }
  };
  resolve(&d->path);
  resolve(&d->eval_path);
  TESSERA_RETURN_IF_ERROR(f.Bool("fallback_to_synthetic", &d->fallback_to_synthetic, false));
  TESSERA_RETURN_IF_ERROR(f.Int("max_examples", &d->max_examples, false, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("num_examples", &d->num_examples, false, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("ids_per_bag", &d->ids_per_bag, false, 0, 1 << 20));
  TESSERA_RETURN_IF_ERROR(f.Float("zipf", &d->zipf, false));
  if (d->zipf < 0) return Status::InvalidArgument("data.zipf: must be >= 0");
  TESSERA_RETURN_IF_ERROR(f.String("labels", &d->labels, false));
  if (d->labels != "learnable" && d->labels != "random") {
    return Status::InvalidArgument("data.labels: must be 'learnable' or 'random', got '" + d->labels + "'");
  }
  TESSERA_RETURN_IF_ERROR(f.Bool("weighted", &d->weighted, false));
  return Status::OK();
}

}  // namespace

const char* CommPrecisionName(CommPrecision p) { return p == CommPrecision::kBf16 ? "bf16" : "fp32"; }

const char* RowRepliesName(RowReplies r) {
  switch (r) {
    case RowReplies::kAuto:
      return "auto";
    case RowReplies::kNever:
      return "never";
    case RowReplies::kAlways:
      return "always";
  }
  return "auto";
}

namespace {

Status ParsePrecision(const JsonFields& f, const char* key, CommPrecision* out) {
  std::string name = CommPrecisionName(*out);
  TESSERA_RETURN_IF_ERROR(f.String(key, &name, false));
  if (name == "fp32") {
    *out = CommPrecision::kFp32;
  } else if (name == "bf16") {
    *out = CommPrecision::kBf16;
  } else {
    return Status::InvalidArgument(std::string("training.qcomms.") + key + ": must be 'fp32' or 'bf16', got '" +
                                   name + "'");
  }
  return Status::OK();
}

// TorchRec's QCommsConfig, by its field names.
Status ParseQComms(const json& j, TrainingConfig* t) {
  JsonFields f(j, "training.qcomms");
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"forward_precision", "backward_precision"}));
  TESSERA_RETURN_IF_ERROR(ParsePrecision(f, "forward_precision", &t->forward_precision));
  return ParsePrecision(f, "backward_precision", &t->backward_precision);
}

Status ParseTraining(const json& j, TrainingConfig* t) {
  JsonFields f(j, "training");
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"batch_size", "steps", "epochs", "dense_optimizer", "sparse_optimizer",
                                      "consistency", "prefetch", "row_replies", "plan_independent_pooling",
                                      "allreduce_bucket_bytes", "qcomms", "seed",
                                      "log_every", "eval_every"}));
  TESSERA_RETURN_IF_ERROR(f.Int("batch_size", &t->batch_size, true, 1, 1 << 24));
  TESSERA_RETURN_IF_ERROR(f.Int("steps", &t->steps, false, 0, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("epochs", &t->epochs, false, 0, 1 << 20));
  if (t->steps == 0 && t->epochs == 0) return Status::InvalidArgument("training: set steps or epochs (both are 0)");
  if (const json* o = f.Get("dense_optimizer")) {
    TESSERA_RETURN_IF_ERROR(ParseOptimizer(*o, "training.dense_optimizer", &t->dense_optimizer));
  }
  if (const json* o = f.Get("sparse_optimizer")) {
    TESSERA_RETURN_IF_ERROR(ParseOptimizer(*o, "training.sparse_optimizer", &t->sparse_optimizer));
  }
  std::string mode = "sync";
  TESSERA_RETURN_IF_ERROR(f.String("consistency", &mode, false));
  if (mode == "sync") {
    t->consistency = Consistency::kSync;
  } else if (mode == "async") {
    t->consistency = Consistency::kAsync;
  } else {
    return Status::InvalidArgument("training.consistency: must be 'sync' or 'async', got '" + mode + "'");
  }
  // On in both modes: a server parks a prefetched lookup of step t+1 until
  // step t is applied (sync) or until its trainer's own push of step t is
  // (async), so it waits there for the update rather than missing it, and
  // training is what it would be without prefetch.
  t->prefetch = true;
  TESSERA_RETURN_IF_ERROR(f.Bool("prefetch", &t->prefetch, false));
  std::string replies = RowRepliesName(t->row_replies);
  TESSERA_RETURN_IF_ERROR(f.String("row_replies", &replies, false));
  if (replies == "auto") {
    t->row_replies = RowReplies::kAuto;
  } else if (replies == "never") {
    t->row_replies = RowReplies::kNever;
  } else if (replies == "always") {
    t->row_replies = RowReplies::kAlways;
  } else {
    return Status::InvalidArgument("training.row_replies: must be 'auto', 'never' or 'always', got '" + replies + "'");
  }
  TESSERA_RETURN_IF_ERROR(f.Bool("plan_independent_pooling", &t->plan_independent_pooling, false));
  TESSERA_RETURN_IF_ERROR(f.Int("allreduce_bucket_bytes", &t->allreduce_bucket_bytes, false, 0, kMaxI64));
  const json* qcomms = nullptr;
  TESSERA_RETURN_IF_ERROR(f.Object("qcomms", false, &qcomms));
  if (qcomms != nullptr) TESSERA_RETURN_IF_ERROR(ParseQComms(*qcomms, t));
  int64_t seed = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("seed", &seed, false, 0, kMaxI64));
  t->seed = static_cast<uint64_t>(seed);
  TESSERA_RETURN_IF_ERROR(f.Int("log_every", &t->log_every, false, 1, kMaxI64));
  TESSERA_RETURN_IF_ERROR(f.Int("eval_every", &t->eval_every, false, 0, kMaxI64));
  return Status::OK();
}

Status ParseModel(const json& j, ModelConfig* m) {
  JsonFields f(j, "model");
  TESSERA_RETURN_IF_ERROR(f.OnlyKeys({"num_dense_features", "bottom_mlp", "top_mlp"}));
  int64_t dense = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("num_dense_features", &dense, false, 0, 1 << 20));
  m->num_dense_features = static_cast<int>(dense);
  TESSERA_RETURN_IF_ERROR(f.IntList("bottom_mlp", &m->bottom_mlp, false, 1, kMaxLayerWidth));
  TESSERA_RETURN_IF_ERROR(f.IntList("top_mlp", &m->top_mlp, true, 1, kMaxLayerWidth));
  if (m->top_mlp.empty() || m->top_mlp.back() != 1) {
    return Status::InvalidArgument("model.top_mlp: must end with 1 (one logit), e.g. [64, 1]");
  }
  if (!m->bottom_mlp.empty() && m->num_dense_features == 0) {
    return Status::InvalidArgument("model.bottom_mlp: given but model.num_dense_features is 0");
  }
  return Status::OK();
}

Status Validate(const JobConfig& c) {
  std::set<std::string> names, features;
  for (const TableConfig& t : c.tables) {
    if (!names.insert(t.name).second) return Status::InvalidArgument("tables: two tables are named '" + t.name + "'");
    for (const std::string& feature : t.feature_names) {
      if (!features.insert(feature).second) {
        return Status::InvalidArgument("tables: feature '" + feature + "' is listed by more than one table");
      }
    }
  }
  if (c.tables.empty()) return Status::InvalidArgument("tables: at least one table is needed");
  if (c.training.eval_every > 0 && c.data.eval_path.empty() &&
      !(c.data.source == "csv" && c.data.csv.eval_fraction > 0)) {
    return Status::InvalidArgument(
        "training.eval_every: the job has no held-out data to evaluate (data.eval_path, or a csv source's "
        "data.eval_fraction)");
  }
  if (c.model.bottom_mlp.empty() && c.model.num_dense_features > 0) {
    // Dense features then enter the top MLP directly, which is allowed.
  }
  if (c.data.source == "criteo") {
    for (const std::string& feature : features) {
      bool ok = feature.size() >= 2 && feature[0] == 'C';
      int col = 0;
      if (ok) {
        try {
          col = std::stoi(feature.substr(1));
        } catch (...) {
          ok = false;
        }
      }
      if (!ok || col < 1 || col > 26 || feature != "C" + std::to_string(col)) {
        return Status::InvalidArgument("feature '" + feature + "': the criteo source has features C1..C26 only");
      }
    }
    if (c.model.num_dense_features != 0 && c.model.num_dense_features != 13) {
      return Status::InvalidArgument("model.num_dense_features: the criteo source has 13 dense features (or use 0)");
    }
  }
  if (c.data.source == "csv") {
    // Every feature is a sparse column and the other way round, so a typo in
    // either list is an error rather than a feature that is never fed.
    const std::vector<std::string>& sparse = c.data.csv.sparse;
    for (const std::string& feature : features) {
      if (std::find(sparse.begin(), sparse.end(), feature) == sparse.end()) {
        return Status::InvalidArgument("feature '" + feature + "': not among data.sparse, the csv source's features");
      }
    }
    for (size_t i = 0; i < sparse.size(); ++i) {
      if (!features.count(sparse[i])) {
        return Status::InvalidArgument("data.sparse[" + std::to_string(i) + "]: column '" + sparse[i] +
                                       "' is not a feature of any table");
      }
    }
    if (c.has_model && c.model.num_dense_features != static_cast<int>(c.data.csv.dense.size())) {
      return Status::InvalidArgument("model.num_dense_features: must equal the " +
                                     std::to_string(c.data.csv.dense.size()) + " columns of data.dense");
    }
  }
  return Status::OK();
}

}  // namespace

const char* PoolingName(PoolingType p) {
  switch (p) {
    case PoolingType::kSum: return "SUM";
    case PoolingType::kMean: return "MEAN";
    case PoolingType::kNone: return "NONE";
  }
  return "?";
}

const char* ConsistencyName(Consistency c) { return c == Consistency::kSync ? "sync" : "async"; }

int64_t OptimizerStateFloats(const std::string& type, int64_t cols) {
  if (type == "adagrad") return cols;
  if (type == "rowwise_adagrad") return 1;
  if (type == "adam") return 2 * cols + 1;
  return 0;
}

int64_t TableConfig::RowBytes() const { return 4 * (embedding_dim + OptimizerStateFloats(optimizer.type, embedding_dim)); }

int JobConfig::TableOfFeature(const std::string& feature) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    for (const std::string& f : tables[t].feature_names) {
      if (f == feature) return static_cast<int>(t);
    }
  }
  return -1;
}

std::vector<std::string> JobConfig::FeatureNames() const {
  std::vector<std::string> out;
  for (const TableConfig& t : tables) out.insert(out.end(), t.feature_names.begin(), t.feature_names.end());
  return out;
}

int64_t JobConfig::InteractionWidth() const {
  int64_t width = model.bottom_mlp.empty() ? model.num_dense_features : model.bottom_mlp.back();
  for (const TableConfig& t : tables) {
    width += static_cast<int64_t>(t.feature_names.size()) * t.embedding_dim;
  }
  return width;
}

namespace {

// The job's tables in the long form, each with the path its errors name:
// "tables" as given, then each of "table_families" expanded member by
// member, with "table_defaults" under every table's own keys (a key a table
// sets replaces the default whole).
//   "table_families": [{"names": "t_C{i}", "range": [1, 26],
//                       "feature_names": ["C{i}"], "num_embeddings": [..26..]}]
// {i} in "names" and "feature_names" becomes the member's number; any other
// key is the members' (a list for num_embeddings: one per member).
Status ExpandTables(const json& j, std::vector<std::pair<json, std::string>>* out) {
  const json defaults = j.contains("table_defaults") ? j.at("table_defaults") : json::object();
  if (!defaults.is_object()) return Status::InvalidArgument("table_defaults: must be an object");
  for (const char* key : {"name", "feature_names"}) {
    if (defaults.contains(key)) {
      return Status::InvalidArgument(std::string("table_defaults.") + key + ": a table's own, not a default");
    }
  }
  auto with_defaults = [&](json table) {
    if (table.is_object()) {
      for (auto it = defaults.begin(); it != defaults.end(); ++it) {
        if (!table.contains(it.key())) table[it.key()] = it.value();
      }
    }
    return table;
  };
  if (j.contains("tables")) {
    const json& tables = j.at("tables");
    if (!tables.is_array()) return Status::InvalidArgument("tables: must be a list");
    for (size_t i = 0; i < tables.size(); ++i) {
      out->emplace_back(with_defaults(tables[i]), "tables[" + std::to_string(i) + "]");
    }
  }
  if (j.contains("table_families")) {
    const json& families = j.at("table_families");
    if (!families.is_array()) return Status::InvalidArgument("table_families: must be a list");
    for (size_t f = 0; f < families.size(); ++f) {
      const std::string path = "table_families[" + std::to_string(f) + "]";
      const json& family = families[f];
      if (!family.is_object()) return Status::InvalidArgument(path + ": must be an object");
      if (!family.contains("names") || !family.at("names").is_string() ||
          family.at("names").get<std::string>().find("{i}") == std::string::npos) {
        return Status::InvalidArgument(path + ".names: required, a name with {i} in it (\"t_C{i}\")");
      }
      const json& range = family.contains("range") ? family.at("range") : json();
      if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() || !range[1].is_number_integer() ||
          range[0].get<int64_t>() > range[1].get<int64_t>() || range[1].get<int64_t>() - range[0].get<int64_t>() >= 100000) {
        return Status::InvalidArgument(path + ".range: required, [first, last] with first <= last (at most 100,000 members)");
      }
      const int64_t first = range[0].get<int64_t>(), last = range[1].get<int64_t>();
      const size_t members = static_cast<size_t>(last - first + 1);
      if (family.contains("num_embeddings") && family.at("num_embeddings").is_array() &&
          family.at("num_embeddings").size() != members) {
        return Status::InvalidArgument(path + ".num_embeddings: a list needs one per member (" +
                                       std::to_string(members) + "), got " +
                                       std::to_string(family.at("num_embeddings").size()));
      }
      auto substitute = [](std::string text, int64_t i) {
        for (size_t at = text.find("{i}"); at != std::string::npos; at = text.find("{i}", at)) {
          text.replace(at, 3, std::to_string(i));
        }
        return text;
      };
      for (int64_t i = first; i <= last; ++i) {
        json table = json::object();
        for (auto it = family.begin(); it != family.end(); ++it) {
          if (it.key() == "names" || it.key() == "range") continue;
          table[it.key()] = it.value();
        }
        table["name"] = substitute(family.at("names").get<std::string>(), i);
        if (table.contains("feature_names") && table.at("feature_names").is_array()) {
          for (json& name : table["feature_names"]) {
            if (name.is_string()) name = substitute(name.get<std::string>(), i);
          }
        }
        if (table.contains("num_embeddings") && table.at("num_embeddings").is_array()) {
          table["num_embeddings"] = family.at("num_embeddings")[static_cast<size_t>(i - first)];
        }
        const std::string member = path + "[" + std::to_string(i - first) + "] (" + table["name"].get<std::string>() + ")";
        out->emplace_back(with_defaults(std::move(table)), member);
      }
    }
  }
  if (out->empty()) return Status::InvalidArgument("tables: none given (a 'tables' list or 'table_families')");
  return Status::OK();
}

}  // namespace

namespace {

// Parses every section of a job config into *c, each on its own, and adds
// the error of each that fails (its first) to *errors: a config's mistakes
// all at once (tessera_master --check_config). The checks across sections
// run only when every section parsed.
void ParseAllSections(const json& j, const std::string& base_dir, JobConfig* out, std::vector<Status>* errors) {
  JobConfig& c = *out;
  auto collect = [errors](const Status& st) {
    if (!st.ok()) errors->push_back(st);
  };
  JsonFields f(j, "");
  collect(f.OnlyKeys({"name", "cluster", "tables", "table_defaults", "table_families", "model", "data", "training",
                      "runtime", "checkpoint"}));
  if (!j.is_object()) return;
  collect(f.String("name", &c.name, false));
  collect([&]() -> Status {
    const json* cl = f.Get("cluster");
    if (cl == nullptr) return Status::OK();
    JsonFields cf(*cl, "cluster");
    TESSERA_RETURN_IF_ERROR(cf.OnlyKeys({"num_ps", "num_trainers", "replicas"}));
    int64_t replicas = c.cluster.replicas;
    TESSERA_RETURN_IF_ERROR(cf.Int("replicas", &replicas, false, 1, 2));
    c.cluster.replicas = static_cast<int>(replicas);
    int64_t ps = c.cluster.num_ps, tr = c.cluster.num_trainers;
    TESSERA_RETURN_IF_ERROR(cf.Int("num_ps", &ps, false, 1, 4096));
    TESSERA_RETURN_IF_ERROR(cf.Int("num_trainers", &tr, false, 1, 4096));
    c.cluster.num_ps = static_cast<int>(ps);
    c.cluster.num_trainers = static_cast<int>(tr);
    return Status::OK();
  }());
  collect([&]() -> Status {
    const json* training = nullptr;
    TESSERA_RETURN_IF_ERROR(f.Object("training", true, &training));
    return ParseTraining(*training, &c.training);
  }());
  collect([&]() -> Status {
    const json* model = nullptr;
    TESSERA_RETURN_IF_ERROR(f.Object("model", false, &model));
    c.has_model = model != nullptr;
    return c.has_model ? ParseModel(*model, &c.model) : Status::OK();
  }());
  collect([&]() -> Status {
    const json* data = nullptr;
    TESSERA_RETURN_IF_ERROR(f.Object("data", true, &data));
    return ParseData(*data, &c.data, base_dir);
  }());
  std::vector<std::pair<json, std::string>> tables;
  const Status expanded = ExpandTables(j, &tables);
  collect(expanded);
  if (expanded.ok()) {
    for (const auto& [spec, path] : tables) {
      TableConfig t;
      const Status st = ParseTable(spec, path, c.training, &t);
      collect(st);
      if (st.ok()) c.tables.push_back(std::move(t));
    }
  }
  collect([&]() -> Status {
    const json* rt = f.Get("runtime");
    if (rt == nullptr) return Status::OK();
    JsonFields rf(*rt, "runtime");
    TESSERA_RETURN_IF_ERROR(rf.OnlyKeys(
        {"heartbeat_ms", "peer_timeout_ms", "connection_loss_ms", "rpc_timeout_ms", "context_ttl_ms", "collective_timeout_ms",
         "recover_lost_servers", "precopy", "replacement_wait_ms", "max_recoveries",
         "recover_lost_trainers", "trainer_replacement_wait_ms", "master_reconnect_ms", "stall_timeout_ms",
         "unsealed_nccl"}));
    TESSERA_RETURN_IF_ERROR(rf.Int("heartbeat_ms", &c.runtime.heartbeat_ms, false, 10, 600000));
    TESSERA_RETURN_IF_ERROR(rf.Int("peer_timeout_ms", &c.runtime.peer_timeout_ms, false, 100, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("connection_loss_ms", &c.runtime.connection_loss_ms, false, 0, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("rpc_timeout_ms", &c.runtime.rpc_timeout_ms, false, 100, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("context_ttl_ms", &c.runtime.context_ttl_ms, false, 100, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("collective_timeout_ms", &c.runtime.collective_timeout_ms, false, 100, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Bool("recover_lost_servers", &c.runtime.recover_lost_servers, false));
    TESSERA_RETURN_IF_ERROR(rf.Bool("precopy", &c.runtime.precopy, false));
    TESSERA_RETURN_IF_ERROR(rf.Int("replacement_wait_ms", &c.runtime.replacement_wait_ms, false, 0, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Bool("recover_lost_trainers", &c.runtime.recover_lost_trainers, false));
    TESSERA_RETURN_IF_ERROR(
        rf.Int("trainer_replacement_wait_ms", &c.runtime.trainer_replacement_wait_ms, false, 0, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("master_reconnect_ms", &c.runtime.master_reconnect_ms, false, 0, 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Int("stall_timeout_ms", &c.runtime.stall_timeout_ms, false, 0, 7LL * 86400000));
    TESSERA_RETURN_IF_ERROR(rf.Bool("unsealed_nccl", &c.runtime.unsealed_nccl, false));
    int64_t max_recoveries = c.runtime.max_recoveries;
    TESSERA_RETURN_IF_ERROR(rf.Int("max_recoveries", &max_recoveries, false, 0, 1000000));
    c.runtime.max_recoveries = static_cast<int>(max_recoveries);
    if (c.runtime.peer_timeout_ms <= c.runtime.heartbeat_ms) {
      return Status::InvalidArgument("runtime.peer_timeout_ms: must exceed runtime.heartbeat_ms");
    }
    return Status::OK();
  }());
  collect([&]() -> Status {
    const json* ck = f.Get("checkpoint");
    if (ck == nullptr) return Status::OK();
    JsonFields cf(*ck, "checkpoint");
    TESSERA_RETURN_IF_ERROR(cf.OnlyKeys({"dir", "every_steps", "keep"}));
    TESSERA_RETURN_IF_ERROR(cf.String("dir", &c.checkpoint.dir, true));
    if (!c.checkpoint.dir.empty() && std::filesystem::path(c.checkpoint.dir).is_relative() && !base_dir.empty()) {
      c.checkpoint.dir = (std::filesystem::path(base_dir) / c.checkpoint.dir).lexically_normal().string();
    }
    TESSERA_RETURN_IF_ERROR(cf.Int("every_steps", &c.checkpoint.every_steps, false, 0, kMaxI64));
    int64_t keep = c.checkpoint.keep;
    TESSERA_RETURN_IF_ERROR(cf.Int("keep", &keep, false, 1, 1000));
    c.checkpoint.keep = static_cast<int>(keep);
    return Status::OK();
  }());
  // Fields a check collected (JsonFieldErrorCollector) hold defaults: the
  // checks across sections would only repeat them.
  if (errors->empty() && !JsonFieldErrorCollector::AnyOnThisThread()) collect(Validate(c));
}

}  // namespace

StatusOr<JobConfig> ParseJobConfigJson(const json& j, const std::string& base_dir) {
  JobConfig c;
  std::vector<Status> errors;
  ParseAllSections(j, base_dir, &c, &errors);
  if (!errors.empty()) return errors.front();
  return c;
}

std::vector<Status> CheckJobConfigText(const std::string& text, const std::string& base_dir, JobConfig* out) {
  json j;
  const Status st = ParseJson(text, &j, /*allow_comments=*/true);
  if (!st.ok()) return {Status::InvalidArgument("job config is " + st.message())};
  std::vector<Status> errors;
  // Every bad field, not each section's first.
  JsonFieldErrorCollector fields;
  ParseAllSections(j, base_dir, out, &errors);
  errors.insert(errors.begin(), fields.errors().begin(), fields.errors().end());
  return errors;
}

std::vector<Status> CheckJobConfigFile(const std::string& path, JobConfig* out) {
  std::ifstream in(path);
  if (!in) return {Status::NotFound("cannot read job config " + path)};
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<Status> errors =
      CheckJobConfigText(ss.str(), std::filesystem::absolute(path).parent_path().string(), out);
  for (Status& e : errors) e = e.WithContext(path);
  return errors;
}

StatusOr<JobConfig> ParseJobConfig(const std::string& text, const std::string& base_dir) {
  json j;
  const Status st = ParseJson(text, &j, /*allow_comments=*/true);
  if (!st.ok()) return Status::InvalidArgument("job config is " + st.message());
  return ParseJobConfigJson(j, base_dir);
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read job config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  auto c = ParseJobConfig(ss.str(), dir);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

Status ResolveDataFiles(JobConfig* job, std::string* note) {
  note->clear();
  DataConfig& d = job->data;
  if (d.source != "criteo" && d.source != "csv") return Status::OK();
  if (!std::filesystem::exists(d.path)) {
    if (!d.fallback_to_synthetic) {
      return Status::NotFound("data.path " + d.path + " does not exist (set data.fallback_to_synthetic to train on "
                              "synthetic data instead)");
    }
    *note = std::string(d.source == "csv" ? "CSV" : "Criteo") + " data not found at " + d.path +
            "; training on synthetic data (" + std::to_string(d.num_examples) + " examples, same features) instead";
    d.source = "synthetic";
    d.path.clear();
    d.eval_path.clear();
    d.csv = CsvDataConfig();
    d.labels = "learnable";
    job->training.eval_every = 0;  // nothing held out to evaluate
    return Status::OK();
  }
  if (!d.eval_path.empty() && !std::filesystem::exists(d.eval_path)) {
    *note = "eval data not found at " + d.eval_path + "; the job runs without evaluation";
    d.eval_path.clear();
    job->training.eval_every = 0;
  }
  return Status::OK();
}

json JobConfig::ToJson() const {
  json tables_json = json::array();
  for (const TableConfig& t : tables) {
    json init = {{"type", t.initializer.type},
                 {"low", t.initializer.low},
                 {"high", t.initializer.high},
                 {"mean", t.initializer.mean},
                 {"std", t.initializer.std}};
    json tj = {{"name", t.name},
               {"num_embeddings", t.num_embeddings},
               {"embedding_dim", t.embedding_dim},
               {"feature_names", t.feature_names},
               {"pooling", PoolingName(t.pooling)},
               {"optimizer", OptimizerToJson(t.optimizer)},
               {"initializer", init},
               {"seed", t.seed}};
    if (!t.sharding_type.empty()) tj["sharding_type"] = t.sharding_type;
    const PlanConstraints& pc = t.constraints;
    json cj = json::object();
    if (!pc.sharding_types.empty()) cj["sharding_types"] = pc.sharding_types;
    if (!pc.ps.empty()) cj["ps"] = pc.ps;
    if (pc.min_shards) cj["min_shards"] = pc.min_shards;
    if (pc.max_shards) cj["max_shards"] = pc.max_shards;
    if (pc.pooling_factor) cj["pooling_factor"] = pc.pooling_factor;
    if (!pc.id_frequency_sample.empty()) cj["id_frequency_sample"] = pc.id_frequency_sample;
    if (!cj.empty()) tj["constraints"] = cj;
    tables_json.push_back(std::move(tj));
  }
  json j{
      {"name", name},
      {"cluster", {{"num_ps", cluster.num_ps}, {"num_trainers", cluster.num_trainers}, {"replicas", cluster.replicas}}},
      {"tables", tables_json},
      {"data",
       {{"source", data.source},
        {"path", data.path},
        {"eval_path", data.eval_path},
        {"fallback_to_synthetic", data.fallback_to_synthetic},
        {"max_examples", data.max_examples},
        {"num_examples", data.num_examples},
        {"ids_per_bag", data.ids_per_bag},
        {"zipf", data.zipf},
        {"labels", data.labels},
        {"weighted", data.weighted}}},
      {"training",
       {{"batch_size", training.batch_size},
        {"steps", training.steps},
        {"epochs", training.epochs},
        {"dense_optimizer", OptimizerToJson(training.dense_optimizer)},
        {"sparse_optimizer", OptimizerToJson(training.sparse_optimizer)},
        {"consistency", ConsistencyName(training.consistency)},
        {"prefetch", training.prefetch},
        {"row_replies", RowRepliesName(training.row_replies)},
        {"plan_independent_pooling", training.plan_independent_pooling},
        {"allreduce_bucket_bytes", training.allreduce_bucket_bytes},
        {"qcomms",
         {{"forward_precision", CommPrecisionName(training.forward_precision)},
          {"backward_precision", CommPrecisionName(training.backward_precision)}}},
        {"seed", training.seed},
        {"log_every", training.log_every},
        {"eval_every", training.eval_every}}},
      {"checkpoint", {{"dir", checkpoint.dir}, {"every_steps", checkpoint.every_steps}, {"keep", checkpoint.keep}}},
      {"runtime",
       {{"heartbeat_ms", runtime.heartbeat_ms},
        {"peer_timeout_ms", runtime.peer_timeout_ms},
        {"rpc_timeout_ms", runtime.rpc_timeout_ms},
        {"context_ttl_ms", runtime.context_ttl_ms},
        {"collective_timeout_ms", runtime.collective_timeout_ms},
        {"recover_lost_servers", runtime.recover_lost_servers},
        {"precopy", runtime.precopy},
        {"replacement_wait_ms", runtime.replacement_wait_ms},
        {"max_recoveries", runtime.max_recoveries},
        {"connection_loss_ms", runtime.connection_loss_ms},
        {"recover_lost_trainers", runtime.recover_lost_trainers},
        {"trainer_replacement_wait_ms", runtime.trainer_replacement_wait_ms},
        {"master_reconnect_ms", runtime.master_reconnect_ms},
        {"stall_timeout_ms", runtime.stall_timeout_ms},
        {"unsealed_nccl", runtime.unsealed_nccl}}},
  };
  if (data.source == "csv") {
    const CsvDataConfig& csv = data.csv;
    json dense = json::array();
    for (const CsvDenseColumn& d : csv.dense) dense.push_back({{"column", d.column}, {"log1p", d.log1p}});
    json label = {{"column", csv.label_column}};
    if (csv.has_label_threshold) label["threshold"] = csv.label_threshold;
    json& dj = j["data"];
    dj["delimiter"] = std::string(1, csv.delimiter);
    dj["header"] = csv.header;
    dj["eval_header"] = csv.eval_header;
    dj["columns"] = csv.columns;
    dj["label"] = label;
    dj["dense"] = dense;
    dj["sparse"] = csv.sparse;
    dj["eval_fraction"] = csv.eval_fraction;
  }
  if (has_model) {
    j["model"] = {{"num_dense_features", model.num_dense_features},
                  {"bottom_mlp", model.bottom_mlp},
                  {"top_mlp", model.top_mlp}};
  }
  return j;
}

}  // namespace tessera
