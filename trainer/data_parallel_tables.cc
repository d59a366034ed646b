#include "trainer/data_parallel_tables.h"

#include <algorithm>

#include "kernels/config_conversion.h"
#include "kernels/embedding_bag.h"

namespace tessera {

StatusOr<DataParallelTables> DataParallelTables::Create(const JobConfig& job, const ShardingPlan& plan) {
  DataParallelTables d;
  size_t offset = 0;
  for (const TablePlan& tp : plan.tables) {
    const TableConfig& config = job.tables[tp.table];
    const int local = tp.type == ShardingType::kDataParallel ? static_cast<int>(d.tables_.size()) : -1;
    for (const std::string& f : config.feature_names) {
      d.features_.push_back(f);
      d.feature_table_.push_back(local);
    }
    if (local < 0) continue;
    Table t;
    t.index = tp.table;
    t.config = config;
    TESSERA_ASSIGN_OR_RETURN(t.optimizer, kernels::ToSparseOptimizerConfig(config.optimizer));
    t.dim = config.embedding_dim;
    t.width = t.dim + kernels::SparseOptimizerStateFloats(t.optimizer.kind, t.dim);
    if (config.num_embeddings * static_cast<int64_t>(t.width) > (int64_t{1} << 31)) {
      return Status::InvalidArgument("table " + config.name +
                                     " is too big to replicate on every trainer (data_parallel is for small tables)");
    }
    // Rows start exactly as a parameter server would start them.
    const kernels::RowInitializer init = kernels::ToRowInitializer(config.initializer, config.seed);
    t.rows.resize(config.num_embeddings * t.width);
    for (int64_t r = 0; r < config.num_embeddings; ++r) {
      float* row = &t.rows[r * t.width];
      kernels::InitRow(init, r, 0, t.dim, row);
      kernels::InitSparseOptimizerState(t.optimizer, t.dim, row + t.dim);
    }
    t.grad_offset = offset;
    offset += config.num_embeddings * (t.dim + 1);
    d.tables_.push_back(std::move(t));
  }
  d.grads_.assign(offset, 0.0f);
  return d;
}

Status DataParallelTables::CheckIds(const KeyedJaggedTensor& kjt) const {
  if (tables_.empty()) return Status::OK();
  const auto value_offsets = kjt.FeatureValueOffsets();
  for (size_t f = 0; f < features_.size(); ++f) {
    if (feature_table_[f] < 0) continue;
    const Table& t = tables_[feature_table_[f]];
    const int key = kjt.KeyIndex(features_[f]);
    if (key < 0) return Status::InvalidArgument("the batch has no feature '" + features_[f] + "'");
    for (int64_t i = value_offsets[key]; i < value_offsets[key + 1]; ++i) {
      if (kjt.values[i] < 0 || kjt.values[i] >= t.config.num_embeddings) {
        return Status::OutOfRange("id " + std::to_string(kjt.values[i]) + " is not a row of table " + t.config.name);
      }
    }
  }
  return Status::OK();
}

Status DataParallelTables::Lookup(const KeyedJaggedTensor& kjt, FeatureOutputs* out) {
  if (tables_.empty()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(CheckIds(kjt));
  const auto value_offsets = kjt.FeatureValueOffsets();
  out->resize(features_.size());
  for (size_t f = 0; f < features_.size(); ++f) {
    if (feature_table_[f] < 0) continue;
    const Table& t = tables_[feature_table_[f]];
    const int key = kjt.KeyIndex(features_[f]);
    const int64_t begin = value_offsets[key], n = value_offsets[key + 1] - begin;
    const std::vector<int64_t> offsets = kjt.BagOffsets(key);
    const bool pooled = t.config.pooling != PoolingType::kNone;
    (*out)[f].resize((pooled ? kjt.batch_size : n) * t.dim);
    kernels::EmbeddingBagForwardArgs<int64_t> args;
    args.rows = t.rows.data();
    args.num_rows = t.config.num_embeddings;
    args.row_stride = t.width;
    args.dim = t.dim;
    args.indices = kjt.values.data() + begin;
    args.offsets = offsets.data();
    args.num_bags = kjt.batch_size;
    args.weights = kjt.weighted() ? kjt.weights.data() + begin : nullptr;
    args.pooling = kernels::ToPooling(t.config.pooling);
    args.out = (*out)[f].data();
    kernels::EmbeddingBagForwardCpu(args);
  }
  return Status::OK();
}

Status DataParallelTables::Backward(const KeyedJaggedTensor& kjt, const FeatureGrads& grads) {
  const auto value_offsets = kjt.FeatureValueOffsets();
  std::vector<int64_t> unique;
  std::vector<int32_t> inverse;
  std::vector<float> row_grads;
  for (size_t f = 0; f < features_.size(); ++f) {
    if (feature_table_[f] < 0) continue;
    Table& t = tables_[feature_table_[f]];
    const int key = kjt.KeyIndex(features_[f]);
    const int64_t begin = value_offsets[key], n = value_offsets[key + 1] - begin;
    dedup_.Run(std::span<const int64_t>(kjt.values.data() + begin, n), &unique, &inverse);
    const std::vector<int64_t> offsets = kjt.BagOffsets(key);
    row_grads.resize(unique.size() * t.dim);
    kernels::EmbeddingBagBackwardArgs<int32_t> args;
    args.grad_out = grads[f].data();
    args.dim = t.dim;
    args.indices = inverse.data();
    args.offsets = offsets.data();
    args.num_bags = kjt.batch_size;
    args.weights = kjt.weighted() ? kjt.weights.data() + begin : nullptr;
    args.pooling = kernels::ToPooling(t.config.pooling);
    args.num_rows = static_cast<int64_t>(unique.size());
    args.grad_rows = row_grads.data();
    kernels::EmbeddingBagBackwardCpu(args);
    float* g = &grads_[t.grad_offset];
    float* touched = g + t.config.num_embeddings * t.dim;
    for (size_t u = 0; u < unique.size(); ++u) {
      float* dst = g + unique[u] * t.dim;
      for (int c = 0; c < t.dim; ++c) dst[c] += row_grads[u * t.dim + c];
      touched[unique[u]] = 1.0f;
    }
  }
  return Status::OK();
}

Status DataParallelTables::Step(Collective* collective) {
  if (tables_.empty()) return Status::OK();
  TESSERA_RETURN_IF_ERROR(collective->AllReduceSum(grads_));
  std::vector<float*> rows;
  std::vector<float> step_grads;
  for (Table& t : tables_) {
    const float* g = &grads_[t.grad_offset];
    const float* touched = g + t.config.num_embeddings * t.dim;
    rows.clear();
    step_grads.clear();
    for (int64_t r = 0; r < t.config.num_embeddings; ++r) {
      if (touched[r] == 0.0f) continue;
      rows.push_back(&t.rows[r * t.width]);
      step_grads.insert(step_grads.end(), g + r * t.dim, g + (r + 1) * t.dim);
    }
    kernels::ApplySparseOptimizerCpu(t.optimizer, t.dim, rows.data(), step_grads.data(),
                                     static_cast<int64_t>(rows.size()));
  }
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  return Status::OK();
}

std::vector<ParamArray> DataParallelTables::Export() const {
  std::vector<ParamArray> out;
  for (const Table& t : tables_) {
    out.push_back(ParamArray::Floats("dp." + t.config.name + ".rows", t.config.num_embeddings, t.width, t.rows));
  }
  return out;
}

}  // namespace tessera

namespace tessera {

Status DataParallelTables::Import(const std::vector<ParamArray>& arrays) {
  for (Table& t : tables_) {
    const ParamArray* a = FindParam(arrays, "dp." + t.config.name + ".rows");
    if (a == nullptr || a->f32.size() != t.rows.size()) {
      return Status::DataLoss("checkpoint lacks the rows of data-parallel table " + t.config.name);
    }
    t.rows = a->f32;
  }
  return Status::OK();
}

}  // namespace tessera
