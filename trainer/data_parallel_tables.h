// Data-parallel tables (TorchRec's DATA_PARALLEL): small tables every trainer
// holds whole, looked up locally and kept identical the way the dense model
// is — the row gradients of all trainers are summed with the collective, and
// each table's own sparse optimizer is applied to every row any trainer
// touched. No parameter server is involved.
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_config.h"
#include "common/keyed_jagged_tensor.h"
#include "common/param_file.h"
#include "common/sharding_plan.h"
#include "common/status.h"
#include "kernels/dedup.h"
#include "kernels/sparse_optimizer.h"
#include "trainer/collective.h"
#include "trainer/embedding_client.h"

namespace tessera {

class DataParallelTables {
 public:
  static StatusOr<DataParallelTables> Create(const JobConfig& job, const ShardingPlan& plan);

  bool empty() const { return tables_.empty(); }

  // Whether every data-parallel feature of `kjt` is in the batch and its ids
  // are rows of its table (Lookup checks the same before it reads a row).
  Status CheckIds(const KeyedJaggedTensor& kjt) const;

  // Fills out[f] for every data-parallel feature f (model order, as
  // EmbeddingClient::features()): pooled [B x dim] or unpooled [ids x dim].
  Status Lookup(const KeyedJaggedTensor& kjt, FeatureOutputs* out);

  // Adds the row gradients of `grads` (model order) for the batch of the last
  // Lookup() to this step's sum.
  Status Backward(const KeyedJaggedTensor& kjt, const FeatureGrads& grads);
  Status Backward(const KeyedJaggedTensor& kjt, const FeatureOutputs& grads) { return Backward(kjt, ViewsOf(grads)); }

  // Sums the step's row gradients over all trainers and applies each table's
  // optimizer once to every row some trainer touched. Every trainer calls it
  // every step (it is a collective).
  Status Step(Collective* collective);

  // The tables' rows (weights and state), for dumps and checkpoints:
  // "dp.<table>.rows". Import puts them back (checkpoint resume).
  std::vector<ParamArray> Export() const;
  Status Import(const std::vector<ParamArray>& arrays);

 private:
  struct Table {
    int index = 0;  // in the job
    TableConfig config;
    kernels::SparseOptimizerConfig optimizer;
    int dim = 0, width = 0;
    std::vector<float> rows;     // [N x width]
    size_t grad_offset = 0;      // into grads_: [N x dim] then touched counts [N]
  };

  std::vector<Table> tables_;
  std::vector<int> feature_table_;  // per model feature: index into tables_, or -1
  std::vector<std::string> features_;
  std::vector<float> grads_;        // all tables' gradients and touched counts
  kernels::IdDeduper dedup_;
};

}  // namespace tessera
