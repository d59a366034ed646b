// A line of a Criteo TSV file (ParseCriteoLine), as OpenCriteoTsv reads the
// file: the input cut at each '\n', every feature C1..C26 asked for.
// Besides not crashing: an example that parses has a 0/1 label, finite
// non-negative dense features and every id inside its table.
#include <cmath>
#include <string_view>

#include <glog/logging.h>

#include "trainer/criteo_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  constexpr int64_t kRows = 1000;
  static const std::vector<CriteoFeature> features = AllCriteoFeatures(kRows);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  CriteoExample example;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (!ParseCriteoLine(line, features, &example).ok()) continue;
    CHECK(example.label == 0.0f || example.label == 1.0f);
    for (float d : example.dense) CHECK(std::isfinite(d) && d >= 0) << d;
    CHECK_EQ(example.ids.size(), features.size());
    for (int64_t id : example.ids) CHECK(id >= 0 && id < kRows) << id;
  }
  return 0;
}
