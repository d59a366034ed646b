#include "trainer/criteo_source.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "trainer/fnv1a.h"
#include "trainer/in_memory_source.h"
#include "trainer/text_fields.h"

namespace tessera {
namespace {

constexpr int kFields = 1 + kCriteoNumDense + kCriteoNumCategorical;  // 40

Status ValidateOptions(const CriteoOptions& options) {
  if (options.max_examples < 0) {
    return Status::InvalidArgument("Criteo max_examples must be >= 0, got " + std::to_string(options.max_examples));
  }
  std::array<bool, kCriteoNumCategorical> used{};
  for (const CriteoFeature& f : options.features) {
    if (f.column < 0 || f.column >= kCriteoNumCategorical) {
      return Status::InvalidArgument("Criteo feature column " + std::to_string(f.column) +
                                     " is outside 0..25 (C1..C26)");
    }
    if (used[f.column]) {
      return Status::InvalidArgument("Criteo feature C" + std::to_string(f.column + 1) + " is listed twice");
    }
    used[f.column] = true;
    if (f.num_rows < 1) {
      return Status::InvalidArgument("Criteo feature C" + std::to_string(f.column + 1) + " needs num_rows >= 1, got " +
                                     std::to_string(f.num_rows));
    }
  }
  return Status::OK();
}

}  // namespace

std::vector<CriteoFeature> AllCriteoFeatures(int64_t num_rows) {
  std::vector<CriteoFeature> out;
  for (int c = 0; c < kCriteoNumCategorical; ++c) out.push_back({.column = c, .num_rows = num_rows});
  return out;
}

Status ParseCriteoLine(std::string_view line, const std::vector<CriteoFeature>& features, CriteoExample* out) {
  // One per thread: the split reuses its capacity line after line.
  thread_local std::vector<std::string_view> fields;
  SplitFields(DropCarriageReturn(line), '\t', &fields);
  if (fields.size() != static_cast<size_t>(kFields)) {
    return Status::InvalidArgument("expected " + std::to_string(kFields) + " tab-separated fields, found " +
                                   std::to_string(fields.size()));
  }
  if (fields[0] != "0" && fields[0] != "1") {
    return Status::InvalidArgument("label must be 0 or 1, got " + QuoteField(fields[0]));
  }
  out->label = fields[0] == "1" ? 1.0f : 0.0f;
  for (int j = 0; j < kCriteoNumDense; ++j) {
    const std::string_view field = fields[1 + j];
    int64_t x = 0;
    if (!field.empty() && !ParseInteger(field, &x)) {
      return Status::InvalidArgument("I" + std::to_string(j + 1) + " is not an integer: " + QuoteField(field));
    }
    // Missing -> x = 0 -> log(1) = 0, as the spec asks.
    out->dense[j] = Log1pOfPositive(static_cast<double>(x));
  }
  out->ids.clear();
  for (const CriteoFeature& f : features) {
    out->ids.push_back(CriteoRow(f.column, fields[1 + kCriteoNumDense + f.column], f.num_rows));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<DataSource>> OpenCriteoTsv(const CriteoOptions& options) {
  TESSERA_RETURN_IF_ERROR(ValidateOptions(options));
  std::ifstream in(options.path, std::ios::binary);
  if (!in.is_open()) {
    return Status::NotFound("cannot open Criteo file " + options.path + ": " + std::strerror(errno));
  }

  InMemoryExamples ex;
  ex.num_dense = kCriteoNumDense;
  for (const CriteoFeature& f : options.features) ex.feature_names.push_back("C" + std::to_string(f.column + 1));
  ex.ids.resize(options.features.size());

  std::string line;
  CriteoExample example;
  int64_t line_no = 0;
  while ((options.max_examples == 0 || line_no < options.max_examples) && std::getline(in, line)) {
    ++line_no;
    const Status st = ParseCriteoLine(line, options.features, &example);
    if (!st.ok()) return st.WithContext(options.path + ":" + std::to_string(line_no));
    ex.labels.push_back(example.label);
    ex.dense.insert(ex.dense.end(), example.dense.begin(), example.dense.end());
    for (size_t f = 0; f < ex.ids.size(); ++f) ex.ids[f].push_back(example.ids[f]);
  }
  if (in.bad()) return Status::DataLoss("error reading Criteo file " + options.path);
  if (ex.labels.empty()) return Status::InvalidArgument("Criteo file " + options.path + " is empty: no examples");
  return NewInMemorySource(std::move(ex), "Criteo");
}

}  // namespace tessera
