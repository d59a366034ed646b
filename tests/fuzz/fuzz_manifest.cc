// A checkpoint's manifest.json read as the master reads it on --resume
// (ParseManifest, then CheckManifest against the resuming job: here the
// manifest's own job when it parses, so the fuzzer gets past the check that
// the tables match). Besides not crashing: an accepted manifest names every
// shard of its plan, each inside its table.
#include <string_view>

#include <glog/logging.h>

#include "common/job_config.h"
#include "master/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  auto manifest = ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!manifest.ok()) return 0;
  const nlohmann::json* job_json = manifest->contains("job") ? &manifest->at("job") : nullptr;
  auto job = job_json != nullptr ? ParseJobConfigJson(*job_json, "") : StatusOr<JobConfig>(Status::NotFound("no job"));
  if (!job.ok()) return 0;
  auto checked = CheckManifest(*manifest, *job);
  if (!checked.ok()) return 0;
  for (const ManifestShard& s : checked->shards) {
    CHECK(s.spec.table >= 0 && s.spec.table < static_cast<int>(job->tables.size()));
    CHECK_EQ(s.table, job->tables[s.spec.table].name);
  }
  return 0;
}
