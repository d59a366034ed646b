// A CSV/TSV training file (OpenCsv, trainer/csv_source.h), read the way a
// job opens one: the input is the file. Its first byte picks the options
// (delimiter, header or given column names, a label threshold or 0/1
// labels, log1p on the dense column), the rest is the file's bytes.
// Besides not crashing: a file that opens serves every example, each with
// a 0/1 label, finite dense features (non-negative under log1p), one id per
// sparse column and every id inside its table.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <glog/logging.h>

#include "trainer/batch.h"
#include "trainer/csv_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  static const std::string path = "/tmp/tessera_fuzz_csv_" + std::to_string(getpid()) + ".csv";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  CsvOptions o;
  o.path = path;
  o.format.delimiter = (mode & 1) ? '\t' : ',';
  o.format.header = (mode & 2) != 0;
  if (!o.format.header || (mode & 4)) o.format.columns = {"label", "d", "s1", "s2"};
  o.format.label_column = "label";
  o.format.has_label_threshold = (mode & 8) != 0;
  o.format.label_threshold = 4;
  o.format.dense = {CsvDenseColumn{"d", (mode & 16) != 0}};
  o.format.sparse = {"s1", "s2"};
  constexpr int64_t kRows[] = {7, 1000};
  o.sparse_rows = {kRows[0], kRows[1]};
  auto source = OpenCsv(o);
  if (!source.ok()) return 0;
  const int64_t n = (*source)->num_examples();
  CHECK_GT(n, 0);
  Batch batch;
  CHECK((*source)->Read(0, n, &batch).ok());
  CHECK_EQ(batch.size, n);
  CHECK_EQ(batch.labels.size(), static_cast<size_t>(n));
  for (float label : batch.labels) CHECK(label == 0.0f || label == 1.0f) << label;
  CHECK_EQ(batch.dense.size(), static_cast<size_t>(n));
  for (float d : batch.dense) CHECK(std::isfinite(d) && (!(mode & 16) || d >= 0)) << d;
  CHECK(batch.sparse.Validate().ok());
  CHECK_EQ(batch.sparse.values.size(), static_cast<size_t>(2 * n));
  CHECK_EQ(batch.sparse.keys.size(), 2u);
  for (size_t i = 0; i < batch.sparse.values.size(); ++i) {
    const std::string& key = batch.sparse.keys[i / static_cast<size_t>(n)];  // feature-major, one id each
    const int64_t rows = key == "s1" ? kRows[0] : kRows[1];
    CHECK(batch.sparse.values[i] >= 0 && batch.sparse.values[i] < rows) << key << " " << batch.sparse.values[i];
  }
  return 0;
}
