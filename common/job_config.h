// The job config: what a user writes (JSON, documented in docs/configuration.md)
// and what the master hands to every server and trainer.
//
// Names follow TorchRec where it has one: a table is an EmbeddingBagConfig
// (name, num_embeddings, embedding_dim, feature_names, pooling).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tessera {

enum class PoolingType : uint8_t { kSum = 0, kMean = 1, kNone = 2 };
enum class Consistency : uint8_t { kSync = 0, kAsync = 1 };

const char* PoolingName(PoolingType p);
const char* ConsistencyName(Consistency c);

// An optimizer and its hyper-parameters. type: sgd, adagrad, rowwise_adagrad, adam.
struct OptimizerSpec {
  std::string type = "sgd";
  double lr = 0.01;
  double eps = 1e-8;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  double initial_accumulator = 0.0;
};

// How a table's rows start. type: uniform (low, high), normal (mean, std), zeros.
struct InitializerSpec {
  std::string type = "uniform";
  double low = -0.05;
  double high = 0.05;
  double mean = 0.0;
  double std = 1.0;
};

// What the planner must respect for one table (TorchRec's
// ParameterConstraints, in this system's terms).
struct PlanConstraints {
  // Sharding types the planner may choose from; empty = table_wise,
  // row_wise, column_wise, table_row_wise (data_parallel only when listed).
  std::vector<std::string> sharding_types;
  // Parameter servers the table's shards may live on; empty = any.
  std::vector<int> ps;
  // Bounds on the number of shards of a split table (0 = no bound).
  int min_shards = 0;
  int max_shards = 0;
  // Expected ids per bag, for the lookup cost; 0 = data.ids_per_bag.
  double pooling_factor = 0;
  // A sample of looked-up ids, for how lookups spread over row ranges
  // (hot rows make a row shard busier than its size says).
  std::vector<int64_t> id_frequency_sample;
};

struct TableConfig {
  std::string name;
  int64_t num_embeddings = 0;
  int embedding_dim = 0;
  std::vector<std::string> feature_names;
  PoolingType pooling = PoolingType::kSum;
  OptimizerSpec optimizer;  // defaults to training.sparse_optimizer
  InitializerSpec initializer;
  // Seed of the table's row initializer. Defaults to one derived from the job
  // seed and the table's name, so reordering tables changes nothing.
  uint64_t seed = 0;
  // table_wise, row_wise, column_wise, table_row_wise, data_parallel, or
  // empty to let the planner choose.
  std::string sharding_type;
  PlanConstraints constraints;

  // Bytes of one stored row: weights plus optimizer state, float32.
  int64_t RowBytes() const;
};

// DLRM-style: bottom MLP on the dense features, concatenated with the pooled
// embeddings of every feature (in table order, then feature order), top MLP
// ending in one logit, BCE-with-logits loss.
// Floats of optimizer state a row of `cols` embedding columns carries
// (sgd 0, adagrad cols, rowwise_adagrad 1, adam 2 x cols + 1).
int64_t OptimizerStateFloats(const std::string& type, int64_t cols);

struct ModelConfig {
  int num_dense_features = 0;
  // Output sizes of the bottom layers (ReLU after each); empty = no bottom MLP.
  std::vector<int64_t> bottom_mlp;
  // Output sizes of the top layers (ReLU between); the last must be 1.
  std::vector<int64_t> top_mlp;
};

// A dense column of a CSV file.
struct CsvDenseColumn {
  std::string column;
  // log(1 + max(x, 0)), as Criteo's integer features; else the value as is.
  bool log1p = false;
};

// How a CSV (or TSV) file becomes examples (data.source "csv").
struct CsvDataConfig {
  char delimiter = ',';
  // Whether data.path starts with a line of column names.
  bool header = true;
  // The same for data.eval_path; defaults to `header`.
  bool eval_header = true;
  // Column names in file order; required when a file has no header, and
  // checked against the header when there is one.
  std::vector<std::string> columns;
  std::string label_column;
  // With a threshold, label = value >= threshold (MovieLens ratings);
  // without, the value must be 0 or 1.
  bool has_label_threshold = false;
  double label_threshold = 0;
  std::vector<CsvDenseColumn> dense;
  // Each a feature of the same name, hashed into its table's rows.
  std::vector<std::string> sparse;
  // Without eval_path: the last floor(N * eval_fraction) rows of data.path
  // (by position) are held out for evaluation; 0 holds none out.
  double eval_fraction = 0;
};

struct DataConfig {
  // "criteo" (a Criteo TSV file), "csv" (any delimited file, as `csv` says)
  // or "synthetic".
  std::string source = "synthetic";
  std::string path;       // criteo, csv: the file, absolute once loaded
  std::string eval_path;  // criteo, csv: optional held-out file, evaluated at the end
  // criteo, csv: when the file is missing, train on synthetic data instead of failing.
  bool fallback_to_synthetic = false;
  int64_t max_examples = 0;  // criteo, csv: 0 = all rows
  CsvDataConfig csv;
  // synthetic:
  int64_t num_examples = 100000;
  int64_t ids_per_bag = 1;
  double zipf = 1.05;
  std::string labels = "learnable";  // or "random"
  bool weighted = false;             // per-id weights for weighted pooling
};

// How a pooled feature's rows come back from the servers. kAuto: as
// distinct rows, pooled by the trainer, when that moves fewer bytes (a batch
// with fewer distinct ids than bags: the hot ids of one-hot features), else
// pooled by the servers. Both ways run the same kernels on the same ids in
// the same order, so outputs and updates are the same bit for bit; kNever
// and kAlways exist to compare them.
enum class RowReplies { kAuto, kNever, kAlways };
const char* RowRepliesName(RowReplies r);

// How values travel (TorchRec's CommType names, lower case).
enum class CommPrecision { kFp32, kBf16 };
const char* CommPrecisionName(CommPrecision p);

struct TrainingConfig {
  int64_t batch_size = 128;  // per trainer
  int64_t steps = 0;         // 0: run `epochs` epochs
  int64_t epochs = 1;
  OptimizerSpec dense_optimizer;
  OptimizerSpec sparse_optimizer;  // default of every table
  Consistency consistency = Consistency::kSync;
  // Each trainer sends step s+1's lookups before step s's dense compute, so
  // they travel while it computes. The servers hold them until step s is
  // applied (sync) or until this trainer's own push of step s is (async), so
  // they miss no update a lookup sent after the push would see. On unless
  // the job turns it off.
  bool prefetch = true;
  RowReplies row_replies = RowReplies::kAuto;
  // A pooled feature of a table split by rows is pooled on the trainer, each
  // bag over all its ids in their order, from the rows of every shard, as
  // one server holding the whole table pools it; so results do not depend
  // on how many servers share the table (bit for bit when servers are
  // added, removed or lost). false: each server pools its part of a bag and
  // the trainer adds the parts, whose rounding depends on the cut.
  bool plan_independent_pooling = false;
  // C++ trainers on CPUs: > 0 sums the dense gradients in buckets of this
  // many bytes while the backward pass computes the rest, as DDP does
  // (trainer/bucketed_allreduce.h); 0: one allreduce after the backward. A
  // job setting, so every trainer cuts the same buckets.
  int64_t allreduce_bucket_bytes = 0;
  // training.qcomms, TorchRec's quantized comms: the lookups' rows
  // (forward) and the embeddings' gradients (backward) on the wire as
  // bfloat16 instead of float32. Half the bytes, each value rounded to 8
  // significant bits once as it is sent; the servers and trainers compute
  // in float32. Off (fp32) unless the job asks: results then differ from an
  // fp32 job's by that rounding.
  CommPrecision forward_precision = CommPrecision::kFp32;
  CommPrecision backward_precision = CommPrecision::kFp32;
  uint64_t seed = 0;
  int64_t log_every = 10;  // master prints progress every this many steps
  // Trainer 0 evaluates the held-out data (data.eval_path) after every this
  // many steps, besides the final evaluation; 0: only the final one.
  int64_t eval_every = 0;
};

struct ClusterConfig {
  int num_ps = 1;
  int num_trainers = 1;
  // Copies of every shard: 2 keeps a backup on another server that applies
  // the same pushes, so a lost server costs no rollback (sync mode; twice
  // the servers' memory and push traffic). Needs 2 servers or more.
  int replicas = 1;
};

// Liveness and deadlines; the defaults suit a LAN.
struct RuntimeConfig {
  int64_t heartbeat_ms = 500;
  // A peer silent for this long is dead: the master ends the job.
  int64_t peer_timeout_ms = 10000;
  // A parameter server whose connection from the master closed and stayed
  // closed this long is dead, silent or not: a crashed process closes its
  // connections at once, so a crash is found in about this time rather
  // than peer_timeout_ms (a hung one keeps them open: silence finds it).
  // 0: only silence counts.
  int64_t connection_loss_ms = 1000;
  // Deadline of one lookup or push (a sync lookup waits for slower trainers).
  int64_t rpc_timeout_ms = 120000;
  // A backward context never completed is dropped after this long.
  int64_t context_ttl_ms = 300000;
  // Gloo collective timeout.
  int64_t collective_timeout_ms = 120000;
  // A parameter server lost while the job trains (dead, or silent for
  // peer_timeout_ms) is recovered from: the job rolls back to its newest
  // checkpoint (or to step 0 without one) on the other servers plus any
  // that registered. false: the job ends with an error instead.
  bool recover_lost_servers = true;
  // A change of the servers (one added or leaving, new backups after a
  // promotion) copies the rows that move while the job trains, and the
  // step boundary then moves only the rows updated since (a shorter
  // pause). false: the boundary moves every row.
  bool precopy = true;
  // How long a recovery waits for a replacement server to register before
  // it goes on with the survivors (0: at once; a later one is added).
  int64_t replacement_wait_ms = 0;
  // A trainer lost while the job trains (dead, or silent for
  // peer_timeout_ms) is recovered from: the job waits for a replacement
  // trainer of the same rank to register (within trainer_replacement_wait_ms),
  // then rolls back to its newest checkpoint (or step 0) and replays. The
  // collective has a fixed world: no trainer means no progress, so a job
  // whose replacement never comes ends. false: the job ends at once instead.
  bool recover_lost_trainers = true;
  int64_t trainer_replacement_wait_ms = 300000;
  // Recoveries a job may make (servers and trainers together) before a
  // further loss ends it.
  int max_recoveries = 10;
  // How long servers and trainers keep retrying a master they lost contact
  // with before they give up: a restarted master (tessera_master --recover)
  // within this time takes the job back and they re-register with it.
  int64_t master_reconnect_ms = 60000;
  // A trainer that heartbeats but finishes no step for this long (blocked
  // on its input, a deadlock) ends the job with an error naming it; 0: never.
  // Checkpoints and recoveries do not count as stalls.
  int64_t stall_timeout_ms = 1800000;
  // In a job with keys, GPU trainers (a GPU each) sum their dense gradients
  // through host memory, sealed as the CPU trainers' are, because NCCL's
  // connections are neither authenticated nor encrypted: a stranger who
  // reaches one could read or feed the sums. true: over NCCL anyway (faster;
  // for networks only the job can reach), which every trainer logs.
  bool unsealed_nccl = false;
};

// Consistent checkpoints at step boundaries (docs/operations.md).
struct CheckpointConfig {
  // Where checkpoints go; every server and the master must reach it. "" = none.
  std::string dir;
  // Take one every this many steps (0 = only on demand: SIGUSR1 to the master
  // or `tessera_master --control checkpoint --master ...`). A checkpoint
  // pauses training for about one write of every row (W2, 400 MB: ~0.2 s,
  // ~6 steps, on the dev machine): at 1000 that is under 1% of step time,
  // and a lost member replays at most 1000 steps. Only with `dir` set.
  int64_t every_steps = 1000;
  // Complete checkpoints kept; older ones are deleted once a newer is complete.
  int keep = 2;
};

struct JobConfig {
  std::string name = "tessera-job";
  ClusterConfig cluster;
  std::vector<TableConfig> tables;
  // The C++ trainer's model. A job without one (no "model" in the config)
  // is for trainers that bring their own (Python, docs/python.md); a C++
  // trainer refuses it.
  ModelConfig model;
  bool has_model = true;
  DataConfig data;
  TrainingConfig training;
  RuntimeConfig runtime;
  CheckpointConfig checkpoint;

  // Index of the table holding `feature`, or -1.
  int TableOfFeature(const std::string& feature) const;
  // Every feature name in model order (tables in order, then their features).
  std::vector<std::string> FeatureNames() const;
  // Width of the concatenation feeding the top MLP.
  int64_t InteractionWidth() const;

  nlohmann::json ToJson() const;
};

// Parses and validates. Relative data paths are resolved against base_dir.
StatusOr<JobConfig> ParseJobConfig(const std::string& text, const std::string& base_dir);
StatusOr<JobConfig> ParseJobConfigJson(const nlohmann::json& j, const std::string& base_dir);
// Reads and parses a file; relative paths are resolved against its folder.
StatusOr<JobConfig> LoadJobConfig(const std::string& path);
// The same, reporting every mistake at once (tessera_master --check_config):
// each section and each table is parsed on its own, every bad field is listed
// (key path, what was expected; JsonFieldErrorCollector) and so is each
// section's first error across its fields, prefixed with the file's name;
// the checks across sections run once every section parsed. Empty: the
// config is valid and *out holds it.
std::vector<Status> CheckJobConfigFile(const std::string& path, JobConfig* out);
// CheckJobConfigFile on the file's text, paths relative to `base_dir`;
// errors unprefixed.
std::vector<Status> CheckJobConfigText(const std::string& text, const std::string& base_dir, JobConfig* out);

// Checks the data files exist. A missing Criteo or CSV file is an error, unless
// data.fallback_to_synthetic: then the job switches to synthetic data with the
// same features and *note says so (so do a missing eval file and its
// evaluation). The master runs this once, so every trainer gets the same data.
Status ResolveDataFiles(JobConfig* job, std::string* note);

}  // namespace tessera
