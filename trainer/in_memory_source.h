// A DataSource over examples held in memory, compactly (dense floats, labels
// and one hashed row id per feature, feature-major): what the file sources
// (Criteo TSV, CSV) keep once a file is parsed, rather than its strings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data_source.h"

namespace tessera {

struct InMemoryExamples {
  // KJT keys, in order.
  std::vector<std::string> feature_names;
  int num_dense = 0;
  std::vector<float> dense;               // [N x num_dense]
  std::vector<float> labels;              // [N]
  std::vector<std::vector<int64_t>> ids;  // [F][N]: one id per feature per example

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  // Keeps examples [begin, end) only. REQUIRES: 0 <= begin <= end <= size().
  void KeepRange(int64_t begin, int64_t end);
};

// REQUIRES: the sizes agree (ids.size() == feature_names.size(), every
// ids[f] and labels of N, dense of N * num_dense); CHECKed. `what` names the
// source in errors ("Criteo", "CSV"). The source is immutable: Read() may be
// called from several threads at once.
std::unique_ptr<DataSource> NewInMemorySource(InMemoryExamples examples, std::string what);

}  // namespace tessera
