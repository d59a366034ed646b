#include "master/table_export.h"

#include <algorithm>
#include <map>

#include <glog/logging.h>

#include "kernels/config_conversion.h"
#include "kernels/row_init.h"
#include "kernels/sparse_optimizer.h"

namespace tessera {

Status ScanRowSource(const RowSource& source, int64_t begin, int64_t end, int width, const SnapshotRowsFn& fn) {
  begin = std::max(begin, source.row_offset);
  end = std::min(end, source.row_offset + source.num_rows);
  if (source.rows == nullptr) {
    return ScanSnapshot(source.snapshot, begin, end, [&](std::span<const int64_t> ids, const float* rows, int w) {
      if (w != width) {
        return Status::DataLoss(source.what + " (" + source.snapshot + "): rows of " + std::to_string(w) +
                                " floats, its table's layout has " + std::to_string(width));
      }
      return fn(ids, rows, w);
    });
  }
  const ParamArray& a = *source.rows;
  if (a.cols != width || a.rows != source.num_rows || static_cast<int64_t>(a.f32.size()) != a.rows * a.cols) {
    return Status::DataLoss(source.what + ": " + std::to_string(a.rows) + " x " + std::to_string(a.cols) +
                            " floats, its table has " + std::to_string(source.num_rows) + " x " +
                            std::to_string(width));
  }
  std::vector<int64_t> ids;
  for (int64_t lo = begin; lo < end; lo += kSnapshotRunRows) {
    const int64_t hi = std::min(end, lo + kSnapshotRunRows);
    ids.resize(hi - lo);
    for (int64_t i = lo; i < hi; ++i) ids[i - lo] = i;
    TESSERA_RETURN_IF_ERROR(fn(ids, a.f32.data() + (lo - source.row_offset) * width, width));
  }
  return Status::OK();
}

StatusOr<TableExport> TableExport::Create(const TableConfig& table, std::vector<RowSource> sources,
                                          bool materialized_only, bool optimizer_state) {
  TableExport e;
  e.table_ = table;
  e.layout_ = RowLayout::For(table.optimizer.type);
  e.materialized_only_ = materialized_only;
  e.optimizer_state_ = optimizer_state;
  e.sources_ = std::move(sources);
  if (table.optimizer.type == "adagrad") e.block_names_ = {"sum"};
  if (table.optimizer.type == "adam") e.block_names_ = {"exp_avg", "exp_avg_sq"};
  if (table.optimizer.type == "rowwise_adagrad") e.row_state_names_ = {"sum"};
  if (table.optimizer.type == "adam") e.row_state_names_ = {"step"};
  CHECK_EQ(static_cast<int>(e.block_names_.size()), e.layout_.per_column_blocks);
  CHECK_EQ(static_cast<int>(e.row_state_names_.size()), e.layout_.per_row_floats);

  const std::string where = "table " + table.name + ": ";
  std::map<int64_t, Group> by_row;
  for (const RowSource& s : e.sources_) {
    Group& g = by_row[s.row_offset];
    if (!g.sources.empty() && g.num_rows != s.num_rows) {
      return Status::DataLoss(where + "shards starting at row " + std::to_string(s.row_offset) + " differ in length");
    }
    g.row_offset = s.row_offset;
    g.num_rows = s.num_rows;
    g.sources.push_back(&s);
  }
  int64_t next_row = 0;
  for (auto& [row, g] : by_row) {
    if (row != next_row) {
      return Status::DataLoss(where + "no shard holds rows from " + std::to_string(next_row));
    }
    next_row = row + g.num_rows;
    std::sort(g.sources.begin(), g.sources.end(),
              [](const RowSource* a, const RowSource* b) { return a->col_offset < b->col_offset; });
    std::vector<std::pair<int, int>> cols;
    int next_col = 0;
    for (const RowSource* s : g.sources) {
      if (s->col_offset != next_col || s->num_cols < 1) {
        return Status::DataLoss(where + "the shards of rows from " + std::to_string(row) +
                                " do not tile its columns");
      }
      cols.emplace_back(s->col_offset, s->num_cols);
      next_col += s->num_cols;
    }
    if (next_col != table.embedding_dim) {
      return Status::DataLoss(where + "the shards of rows from " + std::to_string(row) + " hold " +
                              std::to_string(next_col) + " of its " + std::to_string(table.embedding_dim) +
                              " columns");
    }
    // Per-row state has one value per column range: every row range must
    // be cut the same way for it to be one tensor.
    if (e.groups_.empty()) e.columns_ = cols;
    if (cols != e.columns_) return Status::Unimplemented(where + "row ranges cut into different column ranges");
    e.groups_.push_back(g);
  }
  if (next_row != table.num_embeddings) {
    return Status::DataLoss(where + "its shards hold " + std::to_string(next_row) + " of its " +
                            std::to_string(table.num_embeddings) + " rows");
  }
  return e;
}

StatusOr<std::vector<int64_t>> TableExport::StoredIds(const Group& g) const {
  std::vector<int64_t> ids;
  for (const RowSource* s : g.sources) {
    TESSERA_RETURN_IF_ERROR(ScanRowSource(*s, g.row_offset, g.row_offset + g.num_rows, layout_.Width(s->num_cols),
                                          [&](std::span<const int64_t> run, const float*, int) {
                                            ids.insert(ids.end(), run.begin(), run.end());
                                            return Status::OK();
                                          }));
  }
  // Column shards of one row range normally store the same rows; the union
  // keeps a row any of them stored.
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Status TableExport::CountRows() {
  if (!materialized_only_) {
    rows_ = table_.num_embeddings;
    return Status::OK();
  }
  rows_ = 0;
  for (const Group& g : groups_) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> ids, StoredIds(g));
    rows_ += static_cast<int64_t>(ids.size());
  }
  return Status::OK();
}

std::vector<TensorSpec> TableExport::ModelTensors() const {
  const std::string p = "tables." + table_.name + ".";
  std::vector<TensorSpec> out = {{p + "weight", TensorDtype::kF32, {rows_, table_.embedding_dim}}};
  if (materialized_only_) out.push_back({p + "ids", TensorDtype::kI64, {rows_}});
  return out;
}

std::vector<TensorSpec> TableExport::OptimizerTensors() const {
  const std::string p = "tables." + table_.name + ".";
  std::vector<TensorSpec> out;
  for (const std::string& b : block_names_) out.push_back({p + b, TensorDtype::kF32, {rows_, table_.embedding_dim}});
  const int64_t c = static_cast<int64_t>(columns_.size());
  for (const std::string& r : row_state_names_) {
    out.push_back({p + r, TensorDtype::kF32, c == 1 ? std::vector<int64_t>{rows_} : std::vector<int64_t>{rows_, c}});
  }
  return out;
}

nlohmann::json TableExport::Describe() const {
  nlohmann::json cols = nlohmann::json::array();
  for (const auto& [offset, count] : columns_) cols.push_back({offset, offset + count});
  nlohmann::json state = nlohmann::json::array();
  if (optimizer_state_) {
    for (const TensorSpec& t : OptimizerTensors()) state.push_back(t.name);
  }
  return {{"rows_exported", rows_},
          {"materialized_only", materialized_only_},
          {"column_ranges", cols},
          {"weight", "tables." + table_.name + ".weight"},
          {"optimizer_state", state}};
}

// `count` rows of every tensor of a table, in memory, filled row by row from
// the stored rows of each column shard.
class TableExport::Window {
 public:
  Window(const TableExport& e, int64_t count)
      : e_(e), dim_(e.table_.embedding_dim), cols_(static_cast<int>(e.columns_.size())), count_(count) {
    weight_.resize(count * dim_);
    if (e.optimizer_state_) {
      blocks_.assign(e.layout_.per_column_blocks, std::vector<float>(count * dim_));
      per_row_.assign(e.layout_.per_row_floats, std::vector<float>(count * cols_));
    }
  }

  // Row i of the window, columns of column range `range`, from a stored row
  // [num_cols weights | per-column blocks | per-row floats].
  void Place(int64_t i, int range, const float* src) {
    const auto [offset, n] = e_.columns_[range];
    std::copy(src, src + n, &weight_[i * dim_ + offset]);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      std::copy(src + (b + 1) * n, src + (b + 2) * n, &blocks_[b][i * dim_ + offset]);
    }
    const float* row_state = src + (1 + e_.layout_.per_column_blocks) * n;
    for (size_t p = 0; p < per_row_.size(); ++p) per_row_[p][i * cols_ + range] = row_state[p];
  }

  // To rows [first, first + count) of the tensors.
  Status Write(TensorWriter* model, size_t model_index, TensorWriter* optimizer, size_t optimizer_index,
               int64_t first) const {
    TESSERA_RETURN_IF_ERROR(model->Write(model_index, first * dim_, weight_.data(), count_ * dim_));
    for (const auto& b : blocks_) {
      TESSERA_RETURN_IF_ERROR(optimizer->Write(optimizer_index++, first * dim_, b.data(), count_ * dim_));
    }
    for (const auto& p : per_row_) {
      TESSERA_RETURN_IF_ERROR(optimizer->Write(optimizer_index++, first * cols_, p.data(), count_ * cols_));
    }
    return Status::OK();
  }

 private:
  const TableExport& e_;
  const int dim_, cols_;
  const int64_t count_;
  std::vector<float> weight_;
  std::vector<std::vector<float>> blocks_, per_row_;
};

Status TableExport::Write(TensorWriter* model, size_t model_index, TensorWriter* optimizer, size_t optimizer_index,
                          int64_t window_bytes) {
  const kernels::RowInitializer init = kernels::ToRowInitializer(table_.initializer, table_.seed);
  TESSERA_ASSIGN_OR_RETURN(const kernels::SparseOptimizerConfig opt, kernels::ToSparseOptimizerConfig(table_.optimizer));
  const int64_t row_bytes = 8 + 4 * static_cast<int64_t>(layout_.Width(table_.embedding_dim)) +
                            4 * layout_.per_row_floats * static_cast<int64_t>(columns_.size());
  const int64_t window_rows = std::max<int64_t>(1, window_bytes / row_bytes);
  std::vector<float> row(layout_.Width(table_.embedding_dim));
  int64_t first = 0;  // the group's first row in the tensors
  for (const Group& g : groups_) {
    std::vector<int64_t> stored;
    if (materialized_only_) {
      TESSERA_ASSIGN_OR_RETURN(stored, StoredIds(g));
    }
    const int64_t n = materialized_only_ ? static_cast<int64_t>(stored.size()) : g.num_rows;
    for (int64_t k = 0; k < n; k += window_rows) {
      const int64_t m = std::min(window_rows, n - k);
      // The window's rows: ids [lo, lo + m) or stored[k, k + m).
      const int64_t lo = materialized_only_ ? stored[k] : g.row_offset + k;
      const int64_t hi = materialized_only_ ? stored[k + m - 1] + 1 : lo + m;
      auto id_of = [&](int64_t i) { return materialized_only_ ? stored[k + i] : lo + i; };
      Window w(*this, m);
      // Every row first as the server initialises it, column shard by column
      // shard (EmbeddingShard::InitRow), then the stored rows over it.
      for (int64_t i = 0; i < m; ++i) {
        for (size_t r = 0; r < columns_.size(); ++r) {
          const auto [offset, cols] = columns_[r];
          kernels::InitRow(init, id_of(i), offset, cols, row.data());
          kernels::InitSparseOptimizerState(opt, cols, row.data() + cols);
          w.Place(i, static_cast<int>(r), row.data());
        }
      }
      for (size_t r = 0; r < g.sources.size(); ++r) {
        const RowSource& s = *g.sources[r];
        TESSERA_RETURN_IF_ERROR(ScanRowSource(
            s, lo, hi, layout_.Width(s.num_cols), [&](std::span<const int64_t> ids, const float* rows, int width) {
              for (size_t j = 0; j < ids.size(); ++j) {
                int64_t i = ids[j] - lo;
                if (materialized_only_) {
                  i = std::lower_bound(stored.begin() + k, stored.begin() + k + m, ids[j]) - (stored.begin() + k);
                }
                CHECK(i >= 0 && i < m && id_of(i) == ids[j]) << "row " << ids[j] << " outside its window";
                w.Place(i, static_cast<int>(r), rows + j * width);
              }
              return Status::OK();
            }));
      }
      TESSERA_RETURN_IF_ERROR(w.Write(model, model_index, optimizer, optimizer_index, first + k));
      if (materialized_only_) TESSERA_RETURN_IF_ERROR(model->Write(model_index + 1, first + k, &stored[k], m));
    }
    first += n;
  }
  return Status::OK();
}

}  // namespace tessera
