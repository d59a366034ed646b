#include "trainer/data_factory.h"

#include "trainer/criteo_source.h"
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

}  // namespace

StatusOr<std::unique_ptr<DataSource>> OpenTrainingData(const JobConfig& job) {
  if (job.data.source == "criteo") return OpenCriteo(job, job.data.path);
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
  if (job.data.source != "criteo" || job.data.eval_path.empty()) return std::unique_ptr<DataSource>();
  JobConfig eval = job;
  eval.data.max_examples = 0;
  return OpenCriteo(eval, job.data.eval_path);
}

}  // namespace tessera
