// Builds the DataSource a job config names, with one KJT feature per feature
// of the job's tables (model order).
#pragma once

#include <memory>
#include <string>

#include "common/job_config.h"
#include "common/status.h"
#include "trainer/data_source.h"

namespace tessera {

// The training data of the job.
StatusOr<std::unique_ptr<DataSource>> OpenTrainingData(const JobConfig& job);

// Held-out data: data.eval_path for a Criteo or CSV job, a CSV job's last
// data.eval_fraction of data.path, or null when there is none.
StatusOr<std::unique_ptr<DataSource>> OpenEvalData(const JobConfig& job);

}  // namespace tessera
