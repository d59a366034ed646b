// A DataSource over a Criteo Kaggle DAC file (train.txt format, no header):
//   line := label \t I1 .. \t I13 \t C1 .. \t C26 \n   (40 fields, any may be
//           empty except the label; a line ends with a tab when C26 is empty;
//           a '\r' before the '\n' is dropped, so CRLF files read the same)
// preprocessed as shared/data/criteo_kaggle_8k/REFERENCE.md specifies:
//   dense  d_j = log(1 + max(I_j, 0)) in double, stored as float; missing -> 0
//   sparse column c (C1 is 0) -> row FNV1a64([c] ++ bytes) mod num_rows, the
//          empty string when missing, so every feature has one id per example.
//
// The whole file is read at open and kept compact (dense floats, labels and
// the hashed row ids, feature-major), not as strings: ~ (13 + 1) * 4 + F * 8
// bytes per example.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/data_source.h"

namespace tessera {

// Categorical columns in a Criteo line, and integer (dense) columns.
inline constexpr int kCriteoNumCategorical = 26;
inline constexpr int kCriteoNumDense = 13;

struct CriteoFeature {
  // Categorical column, 0..25 for C1..C26. Its KJT key is "C{column + 1}".
  int column = 0;
  // Rows of this feature's table; ids are hash mod num_rows. REFERENCE.md
  // uses 1000 for every column of the 8k sample.
  int64_t num_rows = 1000;
};

struct CriteoOptions {
  // The tab-separated file to load.
  std::string path;
  // Features to emit, in this order (the KJT's key order). Each column at most
  // once. Empty: no sparse features. AllCriteoFeatures() gives C1..C26.
  std::vector<CriteoFeature> features;
  // Load at most this many lines from the start of the file; 0 loads all.
  // Smaller: quicker tests and experiments on a prefix.
  int64_t max_examples = 0;
};

// C1..C26 in order, each with a table of `num_rows` rows.
std::vector<CriteoFeature> AllCriteoFeatures(int64_t num_rows);

// One line of the file, preprocessed.
struct CriteoExample {
  float label = 0;
  std::array<float, kCriteoNumDense> dense{};
  std::vector<int64_t> ids;  // one per feature asked for, in that order
};

// Parses one line (without its '\n'; a final '\r' is dropped) into *out.
// Errors (InvalidArgument, naming the field but not the file or line): not
// exactly 40 fields; a label other than "0" / "1"; an integer field that is
// not a decimal integer. REQUIRES: `features` passed OpenCriteoTsv's checks
// (columns in 0..25, num_rows >= 1).
Status ParseCriteoLine(std::string_view line, const std::vector<CriteoFeature>& features, CriteoExample* out);

// Loads options.path. Errors (InvalidArgument unless noted), each naming the
// file and, for bad content, the 1-based line number: the file cannot be
// opened (NotFound) or read (DataLoss); a line without exactly 40 fields; a
// label other than "0" / "1"; an integer field that is not a decimal integer;
// an empty file; a feature column outside 0..25 or repeated; num_rows < 1;
// max_examples < 0.
//
// The source is immutable after open; Read() may be called from one thread at
// a time (the DataSource contract), and concurrently from several in fact.
StatusOr<std::unique_ptr<DataSource>> OpenCriteoTsv(const CriteoOptions& options);

}  // namespace tessera
