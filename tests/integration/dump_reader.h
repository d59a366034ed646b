// Reads what a job dumped with `tessera_master --dump_dir`: every server's
// shard files, trainer 0's dense model and its data-parallel tables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/param_file.h"
#include "common/status.h"
#include "kernels/row_init.h"

namespace tessera::testing {

struct Dump {
  // table -> row id -> the row's embedding (column shards put side by side;
  // NaN where no shard wrote). Rows never used are absent.
  std::map<std::string, std::map<int64_t, std::vector<float>>> rows;
  std::vector<ParamArray> dense;  // dense.params
  // table -> how its rows start (the job's initializer and seed) and their
  // width: what an absent row holds.
  std::map<std::string, std::pair<kernels::RowInitializer, int>> initial;
};

StatusOr<Dump> ReadDump(const std::string& dir, const JobConfig& job);

// The largest |a - b| over every embedding row and dense weight. A row
// absent from one dump holds its initial value there (a server need not
// store a row it only initialized), so the other's row is compared with
// that.
double MaxDifference(const Dump& a, const Dump& b, std::string* where);

}  // namespace tessera::testing
