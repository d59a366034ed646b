#include "trainer/criteo_source.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string_view>

#include "trainer/fnv1a.h"

namespace tessera {
namespace {

constexpr int kFields = 1 + kCriteoNumDense + kCriteoNumCategorical;  // 40

class CriteoSource final : public DataSource {
 public:
  CriteoSource(std::vector<std::string> feature_names, std::vector<float> dense, std::vector<float> labels,
               std::vector<std::vector<int64_t>> ids)
      : feature_names_(std::move(feature_names)),
        dense_(std::move(dense)),
        labels_(std::move(labels)),
        ids_(std::move(ids)) {}

  int64_t num_examples() const override { return static_cast<int64_t>(labels_.size()); }
  int num_dense() const override { return kCriteoNumDense; }
  const std::vector<std::string>& feature_names() const override { return feature_names_; }

  Status Read(int64_t begin, int64_t count, Batch* out) override {
    if (begin < 0 || count < 0 || begin > num_examples() - count) {
      return Status::OutOfRange("Criteo read of [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") outside the " + std::to_string(num_examples()) + " examples");
    }
    out->first_example = begin;
    out->size = count;
    out->num_dense = kCriteoNumDense;
    out->dense.assign(dense_.begin() + begin * kCriteoNumDense, dense_.begin() + (begin + count) * kCriteoNumDense);
    out->labels.assign(labels_.begin() + begin, labels_.begin() + begin + count);

    KeyedJaggedTensor& kjt = out->sparse;
    kjt.keys = feature_names_;
    kjt.batch_size = count;
    kjt.lengths.assign(ids_.size() * count, 1);
    kjt.values.resize(ids_.size() * count);
    kjt.weights.clear();
    for (size_t f = 0; f < ids_.size(); ++f) {
      std::copy_n(ids_[f].begin() + begin, count, kjt.values.begin() + f * count);
    }
    return Status::OK();
  }

 private:
  const std::vector<std::string> feature_names_;
  const std::vector<float> dense_;               // [N x 13]
  const std::vector<float> labels_;              // [N]
  const std::vector<std::vector<int64_t>> ids_;  // [F][N]
};

// A field quoted for an error message, cut to a readable length.
std::string Quote(std::string_view field) {
  constexpr size_t kMax = 40;
  if (field.size() <= kMax) return "\"" + std::string(field) + "\"";
  return "\"" + std::string(field.substr(0, kMax)) + "...\"";
}

// Splits `line` on every '\t', keeping empty fields (including a trailing one
// after a final tab). Fills fields[0..min(n, kFields)) and returns n, the
// number of fields in the line.
int SplitTabs(std::string_view line, std::array<std::string_view, kFields>* fields) {
  int n = 0;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    const size_t end = tab == std::string_view::npos ? line.size() : tab;
    if (n < kFields) (*fields)[n] = line.substr(start, end - start);
    ++n;
    if (tab == std::string_view::npos) return n;
    start = tab + 1;
  }
}

// Accepts -?[0-9]+ that fits in int64.
bool ParseInteger(std::string_view field, int64_t* value) {
  if (field.empty() || field[0] == '+') return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, *value);
  return ec == std::errc() && ptr == end;
}

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
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // tolerate CRLF files
  std::array<std::string_view, kFields> fields;
  const int n = SplitTabs(line, &fields);
  if (n != kFields) {
    return Status::InvalidArgument("expected " + std::to_string(kFields) + " tab-separated fields, found " +
                                   std::to_string(n));
  }
  if (fields[0] != "0" && fields[0] != "1") {
    return Status::InvalidArgument("label must be 0 or 1, got " + Quote(fields[0]));
  }
  out->label = fields[0] == "1" ? 1.0f : 0.0f;
  for (int j = 0; j < kCriteoNumDense; ++j) {
    const std::string_view field = fields[1 + j];
    int64_t x = 0;
    if (!field.empty() && !ParseInteger(field, &x)) {
      return Status::InvalidArgument("I" + std::to_string(j + 1) + " is not an integer: " + Quote(field));
    }
    // Missing -> x = 0 -> log(1) = 0, as the spec asks.
    out->dense[j] = static_cast<float>(std::log(1.0 + static_cast<double>(std::max<int64_t>(x, 0))));
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

  const size_t num_features = options.features.size();
  std::vector<std::string> names;
  for (const CriteoFeature& f : options.features) names.push_back("C" + std::to_string(f.column + 1));
  std::vector<float> dense;
  std::vector<float> labels;
  std::vector<std::vector<int64_t>> ids(num_features);

  std::string line;
  CriteoExample example;
  int64_t line_no = 0;
  while ((options.max_examples == 0 || line_no < options.max_examples) && std::getline(in, line)) {
    ++line_no;
    const Status st = ParseCriteoLine(line, options.features, &example);
    if (!st.ok()) return st.WithContext(options.path + ":" + std::to_string(line_no));
    labels.push_back(example.label);
    dense.insert(dense.end(), example.dense.begin(), example.dense.end());
    for (size_t f = 0; f < num_features; ++f) ids[f].push_back(example.ids[f]);
  }
  if (in.bad()) return Status::DataLoss("error reading Criteo file " + options.path);
  if (labels.empty()) return Status::InvalidArgument("Criteo file " + options.path + " is empty: no examples");

  return std::unique_ptr<DataSource>(
      new CriteoSource(std::move(names), std::move(dense), std::move(labels), std::move(ids)));
}

}  // namespace tessera
