#include "common/sharding_plan.h"

#include <nlohmann/json.hpp>

#include "common/job_config.h"
#include "common/json_fields.h"

namespace tessera {

using nlohmann::json;

const char* ShardingTypeName(ShardingType t) {
  switch (t) {
    case ShardingType::kTableWise: return "table_wise";
    case ShardingType::kRowWise: return "row_wise";
    case ShardingType::kColumnWise: return "column_wise";
    case ShardingType::kTableRowWise: return "table_row_wise";
    case ShardingType::kDataParallel: return "data_parallel";
  }
  return "?";
}

Status ParseShardingType(const std::string& name, ShardingType* out) {
  for (ShardingType t : {ShardingType::kTableWise, ShardingType::kRowWise, ShardingType::kColumnWise,
                         ShardingType::kTableRowWise, ShardingType::kDataParallel}) {
    if (name == ShardingTypeName(t)) {
      *out = t;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown sharding type '" + name + "'");
}

std::vector<ShardSpec> ShardingPlan::ShardsOf(int ps) const {
  std::vector<ShardSpec> out;
  for (const ShardSpec& s : shards) {
    if (s.ps == ps) out.push_back(s);
  }
  return out;
}

std::vector<ShardSpec> ShardingPlan::HeldBy(int ps) const {
  std::vector<ShardSpec> out;
  for (const ShardSpec& s : shards) {
    if (s.ps == ps || s.backup_ps == ps) out.push_back(s);
  }
  return out;
}

Status ShardingPlan::FitsJob(const JobConfig& job) const {
  const int num_tables = static_cast<int>(job.tables.size());
  for (const TablePlan& tp : tables) {
    if (tp.table < 0 || tp.table >= num_tables) {
      return Status::InvalidArgument("plan: table plan of table " + std::to_string(tp.table) + ", which the job (" +
                                     std::to_string(num_tables) + " tables) lacks");
    }
  }
  for (const ShardSpec& s : shards) {
    const std::string name = "plan: shard " + std::to_string(s.shard_id);
    if (s.table < 0 || s.table >= num_tables) {
      return Status::InvalidArgument(name + " is of table " + std::to_string(s.table) + ", which the job (" +
                                     std::to_string(num_tables) + " tables) lacks");
    }
    const TableConfig& t = job.tables[s.table];
    // Both offsets and sizes are >= 0 (FromJson); compared without sums that could overflow.
    if (s.row_offset > t.num_embeddings || s.num_rows > t.num_embeddings - s.row_offset) {
      return Status::InvalidArgument(name + " holds rows [" + std::to_string(s.row_offset) + ", +" +
                                     std::to_string(s.num_rows) + ") outside table " + t.name + "'s " +
                                     std::to_string(t.num_embeddings));
    }
    if (s.col_offset > t.embedding_dim || s.num_cols > t.embedding_dim - s.col_offset) {
      return Status::InvalidArgument(name + " holds columns [" + std::to_string(s.col_offset) + ", +" +
                                     std::to_string(s.num_cols) + ") outside table " + t.name + "'s " +
                                     std::to_string(t.embedding_dim));
    }
  }
  return Status::OK();
}

json ShardingPlan::ToJson() const {
  json t = json::array();
  for (const TablePlan& tp : tables) {
    t.push_back({{"table", tp.table}, {"sharding_type", ShardingTypeName(tp.type)}, {"shards", tp.shards}});
  }
  json s = json::array();
  for (const ShardSpec& sh : shards) {
    s.push_back({{"shard_id", sh.shard_id},
                 {"table", sh.table},
                 {"row_offset", sh.row_offset},
                 {"num_rows", sh.num_rows},
                 {"col_offset", sh.col_offset},
                 {"num_cols", sh.num_cols},
                 {"ps", sh.ps},
                 {"backup_ps", sh.backup_ps}});
  }
  return json{{"version", version}, {"num_ps", num_ps}, {"tables", t}, {"shards", s}};
}

StatusOr<ShardingPlan> ShardingPlan::FromJson(const json& j) {
  ShardingPlan p;
  JsonFields f(j, "plan");
  int64_t v = 0, num_ps = 0;
  TESSERA_RETURN_IF_ERROR(f.Int("version", &v, true, 0, UINT32_MAX));
  TESSERA_RETURN_IF_ERROR(f.Int("num_ps", &num_ps, true, 0, 1 << 20));
  p.version = static_cast<uint32_t>(v);
  p.num_ps = static_cast<int>(num_ps);
  const json* shards = f.Get("shards");
  const json* tables = f.Get("tables");
  if (shards == nullptr || !shards->is_array() || tables == nullptr || !tables->is_array()) {
    return Status::InvalidArgument("plan: needs 'tables' and 'shards' lists");
  }
  for (size_t i = 0; i < shards->size(); ++i) {
    JsonFields sf((*shards)[i], "plan.shards[" + std::to_string(i) + "]");
    ShardSpec s;
    int64_t id = 0, table = 0, col_offset = 0, num_cols = 0, ps = 0, backup = -1;
    TESSERA_RETURN_IF_ERROR(sf.Int("shard_id", &id, true, 0, UINT32_MAX));
    TESSERA_RETURN_IF_ERROR(sf.Int("table", &table, true, 0, 1 << 24));
    TESSERA_RETURN_IF_ERROR(sf.Int("row_offset", &s.row_offset, true, 0, INT64_MAX));
    TESSERA_RETURN_IF_ERROR(sf.Int("num_rows", &s.num_rows, true, 0, INT64_MAX));
    TESSERA_RETURN_IF_ERROR(sf.Int("col_offset", &col_offset, true, 0, 1 << 16));
    TESSERA_RETURN_IF_ERROR(sf.Int("num_cols", &num_cols, true, 0, 1 << 16));
    TESSERA_RETURN_IF_ERROR(sf.Int("ps", &ps, true, -1, 1 << 20));
    TESSERA_RETURN_IF_ERROR(sf.Int("backup_ps", &backup, false, -1, 1 << 20));
    if (s.num_rows > INT64_MAX - s.row_offset) {
      return Status::InvalidArgument(sf.path() + ": rows [" + std::to_string(s.row_offset) + ", +" +
                                     std::to_string(s.num_rows) + ") end past the largest row id");
    }
    if (backup >= 0 && backup == ps) return Status::InvalidArgument("plan: a shard's backup is on its own server");
    if (id != static_cast<int64_t>(i)) return Status::InvalidArgument("plan: shard ids must be 0..n-1 in order");
    s.shard_id = static_cast<uint32_t>(id);
    s.table = static_cast<int>(table);
    s.col_offset = static_cast<int>(col_offset);
    s.num_cols = static_cast<int>(num_cols);
    s.ps = static_cast<int>(ps);
    s.backup_ps = static_cast<int>(backup);
    p.shards.push_back(s);
  }
  for (size_t i = 0; i < tables->size(); ++i) {
    JsonFields tf((*tables)[i], "plan.tables[" + std::to_string(i) + "]");
    TablePlan tp;
    int64_t table = 0;
    TESSERA_RETURN_IF_ERROR(tf.Int("table", &table, true, 0, 1 << 24));
    tp.table = static_cast<int>(table);
    std::string type;
    TESSERA_RETURN_IF_ERROR(tf.String("sharding_type", &type, true));
    TESSERA_RETURN_IF_ERROR(ParseShardingType(type, &tp.type));
    std::vector<int64_t> ids;
    TESSERA_RETURN_IF_ERROR(tf.IntList("shards", &ids, true, 0, UINT32_MAX));
    for (int64_t id : ids) {
      if (id >= static_cast<int64_t>(p.shards.size())) return Status::InvalidArgument("plan: unknown shard id");
      tp.shards.push_back(static_cast<uint32_t>(id));
    }
    p.tables.push_back(std::move(tp));
  }
  return p;
}

}  // namespace tessera
