// The job config (ParseJobConfig): what a user writes, and what the master
// hands every server and trainer as JobConfig::ToJson. Besides not crashing:
// a config that parses writes back as one that parses again to the same
// thing, so what the master accepted its servers and trainers accept. And
// the config check (CheckJobConfigText, every bad field at once, defaults
// left where fields were bad) agrees with the parse on whether it is valid.
#include <string>

#include <glog/logging.h>

#include <nlohmann/json.hpp>

#include "common/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = ParseJobConfig(text, "/jobs/base");
  JobConfig checked;
  const std::vector<Status> errors = CheckJobConfigText(text, "/jobs/base", &checked);
  CHECK_EQ(errors.empty(), config.ok()) << (errors.empty() ? config.status().ToString() : errors[0].ToString());
  if (!config.ok()) return 0;
  CHECK(checked.ToJson() == config->ToJson());
  (void)config->FeatureNames();
  (void)config->InteractionWidth();
  for (const TableConfig& t : config->tables) (void)t.RowBytes();
  const nlohmann::json written = config->ToJson();
  auto again = ParseJobConfigJson(written, "");
  CHECK(again.ok()) << again.status() << " for " << written.dump();
  CHECK(again->ToJson() == written) << written.dump();
  return 0;
}
