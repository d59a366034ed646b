#include "trainer/csv_source.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "trainer/in_memory_source.h"
#include "trainer/text_fields.h"

namespace tessera {
namespace {

// Where each used column sits in a row, resolved once from the names.
struct ColumnPlan {
  size_t num_fields = 0;
  size_t label = 0;
  std::vector<size_t> dense;
  std::vector<size_t> sparse;
};

Status ValidateOptions(const CsvOptions& o) {
  if (o.max_examples < 0) {
    return Status::InvalidArgument("CSV max_examples must be >= 0, got " + std::to_string(o.max_examples));
  }
  if (o.part != CsvPart::kAll && !(o.format.eval_fraction > 0 && o.format.eval_fraction < 1)) {
    return Status::InvalidArgument("CSV eval_fraction must be in (0, 1) to split, got " +
                                   std::to_string(o.format.eval_fraction));
  }
  if (o.sparse_rows.size() != o.format.sparse.size()) {
    return Status::InvalidArgument("CSV options give " + std::to_string(o.sparse_rows.size()) + " table sizes for " +
                                   std::to_string(o.format.sparse.size()) + " sparse columns");
  }
  for (size_t s = 0; s < o.sparse_rows.size(); ++s) {
    if (o.sparse_rows[s] < 1) {
      return Status::InvalidArgument("CSV feature " + o.format.sparse[s] + " needs num_rows >= 1, got " +
                                     std::to_string(o.sparse_rows[s]));
    }
  }
  return Status::OK();
}

// Resolves the columns the options name against `names` (the file's columns).
StatusOr<ColumnPlan> PlanColumns(const CsvOptions& o, const std::vector<std::string>& names) {
  auto index_of = [&](const std::string& column, const char* role) -> StatusOr<size_t> {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == column) return i;
    }
    return Status::InvalidArgument(std::string(role) + " column '" + column + "' is not a column of " + o.path);
  };
  ColumnPlan plan;
  plan.num_fields = names.size();
  TESSERA_ASSIGN_OR_RETURN(plan.label, index_of(o.format.label_column, "label"));
  for (const CsvDenseColumn& d : o.format.dense) {
    TESSERA_ASSIGN_OR_RETURN(size_t i, index_of(d.column, "dense"));
    plan.dense.push_back(i);
  }
  for (const std::string& column : o.format.sparse) {
    TESSERA_ASSIGN_OR_RETURN(size_t i, index_of(column, "sparse"));
    plan.sparse.push_back(i);
  }
  return plan;
}

// Parses one row's fields into the end of *ex. Errors name the column.
Status AppendRow(const CsvOptions& o, const ColumnPlan& plan, const std::vector<std::string_view>& fields,
                 InMemoryExamples* ex) {
  const CsvDataConfig& f = o.format;
  if (fields.size() != plan.num_fields) {
    return Status::InvalidArgument("expected " + std::to_string(plan.num_fields) + " fields, found " +
                                   std::to_string(fields.size()));
  }
  const std::string_view label = fields[plan.label];
  double value = 0;
  if (!ParseFiniteDouble(label, &value) || (!f.has_label_threshold && value != 0 && value != 1)) {
    return Status::InvalidArgument("column '" + f.label_column + "': label must be " +
                                   (f.has_label_threshold ? std::string("a number") : std::string("0 or 1")) +
                                   ", got " + QuoteField(label));
  }
  ex->labels.push_back(f.has_label_threshold ? (value >= f.label_threshold ? 1.0f : 0.0f)
                                             : static_cast<float>(value));
  for (size_t d = 0; d < plan.dense.size(); ++d) {
    const std::string_view field = fields[plan.dense[d]];
    if (!ParseFiniteDouble(field, &value)) {
      return Status::InvalidArgument("column '" + f.dense[d].column + "': dense value is not a number: " +
                                     QuoteField(field));
    }
    // A finite double can still overflow a float (-7e84 became -inf, found
    // by fuzz_csv_file); log1p brings any finite double into range.
    if (!f.dense[d].log1p && std::fabs(value) > std::numeric_limits<float>::max()) {
      return Status::InvalidArgument("column '" + f.dense[d].column + "': dense value is out of a float's range: " +
                                     QuoteField(field));
    }
    ex->dense.push_back(f.dense[d].log1p ? Log1pOfPositive(value) : static_cast<float>(value));
  }
  for (size_t s = 0; s < plan.sparse.size(); ++s) {
    ex->ids[s].push_back(CsvRow(f.sparse[s], fields[plan.sparse[s]], o.sparse_rows[s]));
  }
  return Status::OK();
}

std::string JoinNames(const std::vector<std::string>& names, char delimiter) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : std::string(1, delimiter)) + n;
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<DataSource>> OpenCsv(const CsvOptions& o) {
  TESSERA_RETURN_IF_ERROR(ValidateOptions(o));
  std::ifstream in(o.path, std::ios::binary);
  if (!in.is_open()) return Status::NotFound("cannot open CSV file " + o.path + ": " + std::strerror(errno));

  std::string line;
  std::vector<std::string_view> fields;
  int64_t line_no = 0;
  const CsvDataConfig& f = o.format;
  std::vector<std::string> names = f.columns;
  if (f.header) {
    if (!std::getline(in, line)) return Status::InvalidArgument("CSV file " + o.path + " is empty: no header line");
    ++line_no;
    SplitFields(DropCarriageReturn(line), f.delimiter, &fields);
    const std::vector<std::string> header(fields.begin(), fields.end());
    if (!names.empty() && names != header) {
      return Status::InvalidArgument(o.path + ":1: the header (" + JoinNames(header, f.delimiter) +
                                     ") differs from data.columns (" + JoinNames(names, f.delimiter) + ")");
    }
    names = header;
  }
  if (names.empty()) return Status::InvalidArgument("CSV file " + o.path + ": no header and no column names given");
  TESSERA_ASSIGN_OR_RETURN(ColumnPlan plan, PlanColumns(o, names));

  InMemoryExamples ex;
  ex.num_dense = static_cast<int>(f.dense.size());
  ex.feature_names = f.sparse;
  ex.ids.resize(f.sparse.size());
  while ((o.max_examples == 0 || ex.size() < o.max_examples) && std::getline(in, line)) {
    ++line_no;
    SplitFields(DropCarriageReturn(line), f.delimiter, &fields);
    const Status st = AppendRow(o, plan, fields, &ex);
    if (!st.ok()) return st.WithContext(o.path + ":" + std::to_string(line_no));
  }
  if (in.bad()) return Status::DataLoss("error reading CSV file " + o.path);
  if (ex.size() == 0) return Status::InvalidArgument("CSV file " + o.path + " has no rows");

  if (o.part != CsvPart::kAll) {
    const int64_t n = ex.size();
    const auto held_out = static_cast<int64_t>(std::floor(static_cast<double>(n) * f.eval_fraction));
    if (held_out < 1 || held_out >= n) {
      return Status::InvalidArgument("CSV file " + o.path + ": eval_fraction " + std::to_string(f.eval_fraction) +
                                     " of its " + std::to_string(n) + " rows leaves an empty train or eval part");
    }
    if (o.part == CsvPart::kTrain) {
      ex.KeepRange(0, n - held_out);
    } else {
      ex.KeepRange(n - held_out, n);
    }
  }
  return NewInMemorySource(std::move(ex), "CSV");
}

}  // namespace tessera
