// The planner: where each table's shards live (DESIGN.md §3).
//
// For each table it picks a sharding type among those its constraints allow
// — table_wise while the table is small next to a server's share, else split
// by rows (row_wise, or table_row_wise within one host's servers) or by
// columns — then places all shards largest first, each on the allowed server
// where it least raises the larger of (bytes / the server's budget) and
// (expected lookup work / the average server's), keeping a table's shards on
// distinct servers. Bytes count rows x (dim + optimizer state) x 4; lookup work
// counts the bytes a step moves to and from the server (ids in, pooled
// vectors out), from the table's pooling factor and, when given, its
// id-frequency sample (hot rows make a row shard busier than its size).
// data_parallel tables live on the trainers and only when a table asks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/sharding_plan.h"
#include "common/status.h"

namespace tessera {

struct ServerInfo {
  // Host the server runs on: table_row_wise keeps a table within one host.
  std::string host;
  // Bytes of embedding rows the server may hold; 0 = no limit.
  int64_t memory_bytes = 0;
};

struct PlannerOptions {
  std::vector<ServerInfo> servers;
  // Bags per feature per step over all trainers, for the lookup cost;
  // 0 = batch_size x num_trainers from the job.
  int64_t global_batch = 0;
  // A table larger than this fraction of the average server's bytes is split
  // (when its constraints allow), so no server ends up holding much more.
  double split_fraction = 0.5;

  // Re-planning a running job: the plan it runs, and for each server of the
  // new plan its rank in that one (-1: a newcomer). A shard then stays on the
  // server that holds most of its rows already, as long as that server's
  // load stays within (1 + stay_tolerance) of its fair share, so a change
  // of the servers moves few rows; the rest are placed as usual.
  const ShardingPlan* previous = nullptr;
  std::vector<int> previous_rank;
  double stay_tolerance = 0.2;

  // n equal servers without memory limits, each on its own host.
  static PlannerOptions Uniform(int n);
};

StatusOr<ShardingPlan> PlanSharding(const JobConfig& job, const PlannerOptions& options);

// Bytes each server holds under `plan`.
std::vector<int64_t> BytesPerServer(const JobConfig& job, const ShardingPlan& plan);
// Expected bytes moved per step to and from each server (the lookup cost).
std::vector<double> LookupBytesPerServer(const JobConfig& job, const ShardingPlan& plan, int64_t global_batch);

// The plan as tables like TorchRec's planner output:
//   param | sharding type | ranks, then per shard: offsets | sizes | placement,
// then bytes and expected lookup bytes per server.
std::string FormatPlan(const JobConfig& job, const ShardingPlan& plan);

}  // namespace tessera
