// The planner: decides where each table's shards live (DESIGN.md §3).
//
// Each table gets the sharding type its config names (table_wise when it
// names none), and its shards are placed so the bytes (rows x row bytes,
// optimizer state included) per server are as even as a greedy
// largest-first placement makes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "common/status.h"

namespace tessera {

struct PlannerOptions {
  int num_ps = 1;
};

StatusOr<ShardingPlan> PlanSharding(const JobConfig& job, const PlannerOptions& options);

// Bytes each server holds under `plan`.
std::vector<int64_t> BytesPerServer(const JobConfig& job, const ShardingPlan& plan);

// The plan as a table like TorchRec's planner output:
//   param | sharding type | ranks, then per shard: offsets | sizes | placement.
std::string FormatPlan(const JobConfig& job, const ShardingPlan& plan);

}  // namespace tessera
