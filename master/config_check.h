// tessera_master --check_config: a job config's mistakes, all at once, or
// what the job would create.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tessera {

// Checks the config at `path` (common/job_config.h CheckJobConfigFile, and
// that its data files exist) and writes to `out` every error with its key
// path, or, for a valid config, its tables and the sharding plan over
// `num_ps` servers (0: the config's cluster.num_ps) of `ps_memory_bytes`
// each (0: no limit). Returns the process's exit code: 0 valid, 1 not.
int CheckConfigMain(const std::string& path, int num_ps, int64_t ps_memory_bytes, std::ostream& out);

}  // namespace tessera
