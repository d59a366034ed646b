#include "trainer/data_factory.h"

#include "trainer/criteo_source.h"
#include "trainer/csv_source.h"
#include "trainer/synthetic_source.h"

namespace tessera {
namespace {

StatusOr<std::unique_ptr<DataSource>> OpenCriteo(const JobConfig& job, const std::string& path) {
  CriteoOptions o;
  o.path = path;
  o.max_examples = job.data.max_examples;
  for (const TableConfig& t : job.tables) {
    for (const std::string& f : t.feature_names) {
      // Validated at parse time: features are C1..C26.
      o.features.push_back(CriteoFeature{std::stoi(f.substr(1)) - 1, t.num_embeddings});
    }
  }
  return OpenCriteoTsv(o);
}

// A job's CSV file: data.path (`part` kAll or kTrain) or, for evaluation,
// data.eval_path (kAll, every row) or data.path's held-out rows (kEval).
StatusOr<std::unique_ptr<DataSource>> OpenCsvData(const JobConfig& job, const std::string& path, bool header,
                                                  int64_t max_examples, CsvPart part) {
  CsvOptions o;
  o.path = path;
  o.format = job.data.csv;
  o.format.header = header;
  // Validated at parse time: the features are exactly the sparse columns.
  // The KJT takes them in model order, whatever data.sparse's order.
  o.format.sparse.clear();
  for (const TableConfig& t : job.tables) {
    for (const std::string& f : t.feature_names) {
      o.format.sparse.push_back(f);
      o.sparse_rows.push_back(t.num_embeddings);
    }
  }
  o.max_examples = max_examples;
  o.part = part;
  return OpenCsv(o);
}

}  // namespace

StatusOr<std::unique_ptr<DataSource>> OpenTrainingData(const JobConfig& job) {
  if (job.data.source == "criteo") return OpenCriteo(job, job.data.path);
  if (job.data.source == "csv") {
    return OpenCsvData(job, job.data.path, job.data.csv.header, job.data.max_examples,
                       job.data.csv.eval_fraction > 0 ? CsvPart::kTrain : CsvPart::kAll);
  }
  SyntheticOptions o;
  o.num_examples = job.data.num_examples;
  o.num_dense = job.model.num_dense_features;
  o.seed = job.training.seed;
  o.labels = job.data.labels == "random" ? SyntheticLabels::kRandom : SyntheticLabels::kLearnable;
  for (const TableConfig& t : job.tables) {
    for (const std::string& f : t.feature_names) {
      SyntheticFeature sf;
      sf.name = f;
      sf.num_rows = t.num_embeddings;
      sf.ids_per_bag = static_cast<int>(job.data.ids_per_bag);
      sf.zipf = job.data.zipf;
      sf.weighted = job.data.weighted;
      o.features.push_back(sf);
    }
  }
  return OpenSynthetic(o);
}

StatusOr<std::unique_ptr<DataSource>> OpenEvalData(const JobConfig& job) {
  const DataConfig& d = job.data;
  if (d.source == "csv" && !d.eval_path.empty()) return OpenCsvData(job, d.eval_path, d.csv.eval_header, 0, CsvPart::kAll);
  if (d.source == "csv" && d.csv.eval_fraction > 0) {
    return OpenCsvData(job, d.path, d.csv.header, d.max_examples, CsvPart::kEval);
  }
  if (job.data.source != "criteo" || job.data.eval_path.empty()) return std::unique_ptr<DataSource>();
  JobConfig eval = job;
  eval.data.max_examples = 0;
  return OpenCriteo(eval, job.data.eval_path);
}

}  // namespace tessera
