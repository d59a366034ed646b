// Built against an installed Tessera (tests/install/install_test.sh): loads a
// job config, plans its sharding over two servers, and parses a broken config,
// through the installed headers and static libraries.
//   consumer job.json
#include <iostream>

#include "common/job_config.h"
#include "common/status.h"
#include "master/planner.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer job.json\n";
    return 2;
  }
  tessera::StatusOr<tessera::JobConfig> job = tessera::LoadJobConfig(argv[1]);
  if (!job.ok()) {
    std::cerr << "consumer: " << job.status() << "\n";
    return 1;
  }
  tessera::StatusOr<tessera::ShardingPlan> plan = tessera::PlanSharding(*job, tessera::PlannerOptions::Uniform(2));
  if (!plan.ok()) {
    std::cerr << "consumer: " << plan.status() << "\n";
    return 1;
  }
  std::cout << "consumer: job '" << job->name << "': " << job->tables.size() << " table(s), " << plan->shards.size()
            << " shard(s) on " << plan->num_ps << " server(s)\n";
  tessera::StatusOr<tessera::JobConfig> broken = tessera::ParseJobConfig("{\"tables\": 7}", ".");
  std::cout << "consumer: a broken config: " << tessera::StatusCodeName(broken.status().code()) << "\n";
  return broken.ok() ? 1 : 0;
}
