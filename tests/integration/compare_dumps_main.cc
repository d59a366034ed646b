// tessera_compare_dumps: are two jobs' parameters the same? Reads what two
// runs of one job config dumped (tessera_master --dump_dir) and prints the
// largest difference over every embedding row and dense weight. Exit 0 when
// it is within --tolerance, 1 when not, 2 when a dump cannot be read.
// tests/gpu/run_device_checks.sh compares the GPU job with the CPU job by it.
#include <gflags/gflags.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/job_config.h"
#include "tests/integration/dump_reader.h"

DEFINE_string(config, "", "The job config both runs used");
DEFINE_string(a, "", "One run's --dump_dir");
DEFINE_string(b, "", "The other run's --dump_dir");
DEFINE_double(tolerance, 1e-4, "The largest difference that counts as the same");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("tessera_compare_dumps --config job.json --a DUMP_DIR --b DUMP_DIR [--tolerance 1e-4]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::ifstream in(FLAGS_config);
  if (FLAGS_config.empty() || FLAGS_a.empty() || FLAGS_b.empty() || !in) {
    std::cerr << "tessera_compare_dumps: need --config (readable), --a and --b\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto job = tessera::ParseJobConfig(text.str(), "");
  if (!job.ok()) {
    std::cerr << "tessera_compare_dumps: " << FLAGS_config << ": " << job.status() << "\n";
    return 2;
  }
  auto a = tessera::testing::ReadDump(FLAGS_a, *job);
  auto b = tessera::testing::ReadDump(FLAGS_b, *job);
  if (!a.ok() || !b.ok()) {
    std::cerr << "tessera_compare_dumps: " << (a.ok() ? b.status() : a.status()) << "\n";
    return 2;
  }
  size_t rows = 0, dense = 0;
  for (const auto& [table, r] : a->rows) rows += r.size();
  for (const auto& p : a->dense) dense += p.f32.size();
  if (rows == 0 || dense == 0) {
    std::cerr << "tessera_compare_dumps: " << FLAGS_a << " holds " << rows << " rows and " << dense
              << " dense weights: nothing to compare\n";
    return 2;
  }
  std::string where;
  const double diff = tessera::testing::MaxDifference(*a, *b, &where);
  std::cout << "max |a - b| = " << diff << " (" << where << ") over " << rows << " rows and " << dense
            << " dense weights; tolerance " << FLAGS_tolerance << "\n";
  return diff <= FLAGS_tolerance ? 0 : 1;
}
