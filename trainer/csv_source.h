// A DataSource over a delimited text file (CSV, TSV): Avazu, MovieLens's
// u.data, or a user's own data, described by options rather than code.
//
//   file   := [header] row*          header := name (delim name)* \n
//   row    := field (delim field)* \n (exactly as many fields as columns; a
//             '\r' before the '\n' is dropped, so CRLF files read the same)
// No quoting or escaping: a field is whatever lies between two delimiters.
//
// Each example takes, by column name:
//   label   value >= threshold when a threshold is given (MovieLens ratings),
//           else the value, which must be 0 or 1
//   dense   the value as a float, or log(1 + max(x, 0)) with log1p (Criteo's
//           transform)
//   sparse  one feature per column, named as the column; its value v goes to
//           row FNV1a64(bytes(column) ++ [0] ++ bytes(v)) mod num_rows (the
//           column name keeps equal values of two columns sharing a table
//           apart; an empty v hashes as the empty string, as Criteo's do)
// A bad row is an error naming the file, the 1-based line and the column, as
// for Criteo files (no row is skipped silently): the wrong number of fields,
// a label or dense value that is empty or not a number.
//
// The whole file is read at open and kept compact (trainer/in_memory_source.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"
#include "trainer/data_source.h"
#include "trainer/fnv1a.h"

namespace tessera {

// Which rows of the file a source serves, for a train/eval split by position
// (eval_fraction).
enum class CsvPart { kAll, kTrain, kEval };

struct CsvOptions {
  std::string path;
  // The file's format and columns, as the job config gives them
  // (common/job_config.h). `format.header` says whether this file has a
  // header line; eval_header is not read (the caller picks per file).
  CsvDataConfig format;
  // Rows of each sparse column's table, one per format.sparse; ids are
  // hash mod rows.
  std::vector<int64_t> sparse_rows;
  // Read at most this many rows from the start of the file; 0 reads all.
  int64_t max_examples = 0;
  // kTrain / kEval: the last floor(N * format.eval_fraction) of the N rows
  // read are the eval part, the others the train part. REQUIRES:
  // eval_fraction in (0, 1) unless part is kAll.
  CsvPart part = CsvPart::kAll;
};

// FNV1a64(bytes(column) ++ [0] ++ bytes(value)).
constexpr uint64_t CsvHash(std::string_view column, std::string_view value) {
  return Fnv1a64(value, Fnv1a64(std::string_view("\0", 1), Fnv1a64(column)));
}

// The table row of `value` in column `column`. REQUIRES: num_rows >= 1.
constexpr int64_t CsvRow(std::string_view column, std::string_view value, int64_t num_rows) {
  return static_cast<int64_t>(CsvHash(column, value) % static_cast<uint64_t>(num_rows));
}

// Loads options.path. Errors (InvalidArgument unless noted), each naming the
// file and, for bad content, the line and column: the file cannot be opened
// (NotFound) or read (DataLoss); a header that is missing or differs from
// `columns`; no column names at all; a named column that is not a column; a
// bad row (above); no rows, or an empty train or eval part; bad options
// (a sparse_rows per sparse column, each >= 1; max_examples >= 0;
// eval_fraction in (0, 1) for a part).
//
// The source is immutable after open; Read() may be called from one thread at
// a time (the DataSource contract), and concurrently from several in fact.
StatusOr<std::unique_ptr<DataSource>> OpenCsv(const CsvOptions& options);

}  // namespace tessera
