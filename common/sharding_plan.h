// The sharding plan: where every piece of every table lives (DESIGN.md §3).
//
// A table is cut into shards, each a rectangle of rows x columns placed on one
// parameter server: table-wise is one shard holding everything, row-wise cuts
// rows into contiguous ranges, column-wise cuts the embedding dimension.
// Shard ids are global (an index into ShardingPlan::shards) and travel in
// every lookup and push. A plan has a version; requests carry it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tessera {

struct JobConfig;

enum class ShardingType : uint8_t { kTableWise = 0, kRowWise = 1, kColumnWise = 2, kTableRowWise = 3, kDataParallel = 4 };
const char* ShardingTypeName(ShardingType t);
Status ParseShardingType(const std::string& name, ShardingType* out);

struct ShardSpec {
  uint32_t shard_id = 0;
  int table = 0;  // index into JobConfig::tables
  int64_t row_offset = 0;
  int64_t num_rows = 0;
  int col_offset = 0;
  int num_cols = 0;
  int ps = 0;  // parameter-server rank
  // With replicas: the rank of the server keeping a backup that applies the
  // same pushes, so that losing `ps` costs no rollback; -1: none.
  int backup_ps = -1;

  bool HoldsRow(int64_t row) const { return row >= row_offset && row < row_offset + num_rows; }
};

struct TablePlan {
  int table = 0;
  ShardingType type = ShardingType::kTableWise;
  std::vector<uint32_t> shards;  // ids, by row range then column range
};

struct ShardingPlan {
  uint32_t version = 1;
  int num_ps = 0;
  std::vector<TablePlan> tables;  // one per JobConfig table, same order
  std::vector<ShardSpec> shards;

  // Shards placed on parameter server `ps` (as primary).
  std::vector<ShardSpec> ShardsOf(int ps) const;
  // Shards server `ps` keeps: those it serves and those it backs up.
  std::vector<ShardSpec> HeldBy(int ps) const;

  // Checks the plan is one for `job`: each table plan and each shard names
  // a table of the job, and each shard lies inside its table's rows and
  // columns. FromJson checks only the plan's own shape.
  Status FitsJob(const JobConfig& job) const;

  nlohmann::json ToJson() const;
  static StatusOr<ShardingPlan> FromJson(const nlohmann::json& j);
};

}  // namespace tessera
