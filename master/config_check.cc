#include "master/config_check.h"

#include <vector>

#include "common/job_config.h"
#include "master/planner.h"

namespace tessera {

int CheckConfigMain(const std::string& path, int num_ps, int64_t ps_memory_bytes, std::ostream& out) {
  JobConfig job;
  std::vector<Status> errors = CheckJobConfigFile(path, &job);
  if (errors.empty()) {
    std::string note;
    // A missing data file is the config's mistake too (unless it says to
    // fall back to synthetic data, which the note then says).
    if (Status data = ResolveDataFiles(&job, &note); !data.ok()) errors.push_back(data.WithContext(path));
    if (!note.empty()) out << "note: " << note << "\n";
  }
  if (!errors.empty()) {
    out << errors.size() << (errors.size() == 1 ? " error" : " errors") << " in " << path << ":\n";
    for (const Status& e : errors) out << "  " << e.message() << "\n";
    return 1;
  }
  if (num_ps > 0) job.cluster.num_ps = num_ps;
  int64_t rows = 0, features = 0;
  for (const TableConfig& t : job.tables) {
    rows += t.num_embeddings;
    features += static_cast<int64_t>(t.feature_names.size());
  }
  out << path << ": valid. Job '" << job.name << "': " << job.tables.size() << " table(s), " << features
      << " feature(s), " << rows << " rows; " << (job.has_model ? "the DLRM model" : "no model (trainers bring theirs)")
      << "; data: " << job.data.source << "; " << job.cluster.num_ps << " server(s), " << job.cluster.num_trainers
      << " trainer(s), " << ConsistencyName(job.training.consistency) << " mode\n";
  PlannerOptions planner = PlannerOptions::Uniform(job.cluster.num_ps);
  for (auto& server : planner.servers) server.memory_bytes = ps_memory_bytes;
  auto plan = PlanSharding(job, planner);
  if (!plan.ok()) {
    out << "1 error in " << path << ":\n  no sharding plan over " << job.cluster.num_ps
        << " server(s): " << plan.status().message() << "\n";
    return 1;
  }
  out << FormatPlan(job, *plan);
  return 0;
}

}  // namespace tessera
