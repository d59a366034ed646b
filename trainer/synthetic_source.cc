#include "trainer/synthetic_source.h"

#include <cmath>
#include <set>
#include <string>

#include "kernels/row_init.h"
#include "trainer/zipf_sampler.h"

namespace tessera {
namespace {

using kernels::SplitMix64;
using kernels::UnitFloat;

// Domain tags, so the streams of ids, weights, scores, dense values and noise
// never share a key.
constexpr uint64_t kIdTag = 0x1d5a17e5eed00001ULL;
constexpr uint64_t kWeightTag = 0x3e1947e5eed00002ULL;
constexpr uint64_t kScoreTag = 0x5c03e5eed0000003ULL;
constexpr uint64_t kDenseTag = 0x0de45e5eed000004ULL;
constexpr uint64_t kLabelTag = 0x1abe15eed0000005ULL;
constexpr uint64_t kDenseWeightTag = 0x0d3a5e7eed000006ULL;

uint64_t Key(uint64_t seed, uint64_t tag, uint64_t index) { return SplitMix64(SplitMix64(seed ^ tag) + index); }

// Everything Read() needs about one feature, computed once at open.
struct FeaturePlan {
  ZipfSampler sampler;
  int ids_per_bag;
  bool weighted;
  uint64_t id_key;      // ids of (example, position): stream from id_key ^ counter
  uint64_t weight_key;  // weights of (example, position)
  uint64_t score_key;   // teacher score of an id
  float bag_scale;      // 1 / sqrt(ids_per_bag), 0 for empty bags
};

class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(const SyntheticOptions& options, std::vector<FeaturePlan> plans)
      : options_(options), plans_(std::move(plans)) {
    for (const SyntheticFeature& f : options_.features) names_.push_back(f.name);
    for (const FeaturePlan& p : plans_) {
      ids_per_example_ += p.ids_per_bag;
      any_weighted_ = any_weighted_ || p.weighted;
      teacher_terms_ += p.ids_per_bag > 0;
    }
    teacher_terms_ += options_.num_dense > 0;
    dense_key_ = Key(options_.seed, kDenseTag, 0);
    label_key_ = Key(options_.seed, kLabelTag, 0);
    // Fixed +-1 weights of the teacher's dense part; a centred U(0, 1) has
    // variance 1/12, so sqrt(12 / num_dense) makes the part unit-variance.
    const double dense_scale = options_.num_dense > 0 ? std::sqrt(12.0 / options_.num_dense) : 0.0;
    for (int j = 0; j < options_.num_dense; ++j) {
      const bool positive = Key(options_.seed, kDenseWeightTag, j) >> 63;
      dense_weights_.push_back(static_cast<float>(positive ? dense_scale : -dense_scale));
    }
    logit_scale_ = teacher_terms_ > 0 ? static_cast<float>(kTeacherScale / std::sqrt(teacher_terms_)) : 0.0f;
  }

  int64_t num_examples() const override { return options_.num_examples; }
  int num_dense() const override { return options_.num_dense; }
  const std::vector<std::string>& feature_names() const override { return names_; }

  Status Read(int64_t begin, int64_t count, Batch* out) override {
    if (begin < 0 || count < 0 || begin > num_examples() - count) {
      return Status::OutOfRange("synthetic read of [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") outside the " + std::to_string(num_examples()) + " examples");
    }
    const bool learnable = options_.labels == SyntheticLabels::kLearnable;
    out->first_example = begin;
    out->size = count;
    out->num_dense = options_.num_dense;
    // labels holds the teacher logit until the end.
    out->labels.assign(count, 0.0f);
    ReadDense(begin, count, out);

    KeyedJaggedTensor& kjt = out->sparse;
    kjt.keys = names_;
    kjt.batch_size = count;
    kjt.lengths.resize(plans_.size() * count);
    kjt.values.resize(ids_per_example_ * count);
    kjt.weights.resize(any_weighted_ ? kjt.values.size() : 0);
    int64_t* values = kjt.values.data();
    float* weights = kjt.weights.data();
    for (size_t f = 0; f < plans_.size(); ++f) {
      const FeaturePlan& p = plans_[f];
      const int64_t n = count * p.ids_per_bag;
      // Id j of example i is draw i * ids_per_bag + j of the feature's stream,
      // so a range of examples is a range of draws.
      const uint64_t first = static_cast<uint64_t>(begin) * p.ids_per_bag;
      std::fill_n(kjt.lengths.begin() + f * count, count, p.ids_per_bag);
      p.sampler.SampleKeyed(p.id_key, first, n, values);
      if (any_weighted_) {
        for (int64_t k = 0; k < n; ++k) {
          weights[k] = p.weighted ? 0.5f + UnitFloat(SplitMix64(p.weight_key ^ (first + k))) : 1.0f;
        }
      }
      if (learnable) {
        for (int64_t b = 0; b < count; ++b) {
          float bag_score = 0.0f;
          for (int j = 0; j < p.ids_per_bag; ++j) {
            const int64_t k = b * p.ids_per_bag + j;
            // Score +-1 from the top bit, without a branch (it is a coin flip).
            const auto bit = static_cast<float>(SplitMix64(p.score_key ^ static_cast<uint64_t>(values[k])) >> 63);
            bag_score += (any_weighted_ ? weights[k] : 1.0f) * (2.0f * bit - 1.0f);
          }
          out->labels[b] += bag_score * p.bag_scale;
        }
      }
      values += n;
      if (any_weighted_) weights += n;
    }

    for (int64_t b = 0; b < count; ++b) {
      const uint64_t bits = SplitMix64(label_key_ ^ static_cast<uint64_t>(begin + b));
      if (!learnable) {
        out->labels[b] = static_cast<float>(bits >> 63);
        continue;
      }
      // Logistic noise: log(u / (1 - u)) with u in (0, 1).
      const double u = (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
      const double noise = kTeacherNoise * std::log(u / (1.0 - u));
      out->labels[b] = out->labels[b] * logit_scale_ + noise > 0.0 ? 1.0f : 0.0f;
    }
    return Status::OK();
  }

 private:
  // Fills out->dense and adds the teacher's dense part to out->labels.
  void ReadDense(int64_t begin, int64_t count, Batch* out) const {
    const int d = options_.num_dense;
    out->dense.resize(count * d);
    float* dense = out->dense.data();
    for (int64_t b = 0; b < count; ++b) {
      const uint64_t first = static_cast<uint64_t>(begin + b) * d;
      float part = 0.0f;
      for (int j = 0; j < d; ++j) {
        const float x = UnitFloat(SplitMix64(dense_key_ ^ (first + j)));
        *dense++ = x;
        part += dense_weights_[j] * (x - 0.5f);
      }
      out->labels[b] += part;
    }
  }

  const SyntheticOptions options_;
  const std::vector<FeaturePlan> plans_;
  std::vector<std::string> names_;
  int64_t ids_per_example_ = 0;
  bool any_weighted_ = false;
  int teacher_terms_ = 0;  // non-empty features, plus 1 for the dense part
  uint64_t dense_key_ = 0;
  uint64_t label_key_ = 0;
  std::vector<float> dense_weights_;  // [num_dense], +-sqrt(12 / num_dense)
  float logit_scale_ = 0.0f;          // kTeacherScale / sqrt(teacher_terms_)
};

}  // namespace

StatusOr<std::unique_ptr<DataSource>> OpenSynthetic(const SyntheticOptions& options) {
  if (options.num_examples < 1) {
    return Status::InvalidArgument("synthetic num_examples must be >= 1, got " + std::to_string(options.num_examples));
  }
  if (options.num_dense < 0) {
    return Status::InvalidArgument("synthetic num_dense must be >= 0, got " + std::to_string(options.num_dense));
  }
  if (options.labels != SyntheticLabels::kLearnable && options.labels != SyntheticLabels::kRandom) {
    return Status::InvalidArgument("synthetic labels: unknown kind " +
                                   std::to_string(static_cast<int>(options.labels)));
  }
  std::set<std::string> seen;
  std::vector<FeaturePlan> plans;
  for (size_t f = 0; f < options.features.size(); ++f) {
    const SyntheticFeature& feature = options.features[f];
    const std::string feature_id = "synthetic feature " + std::to_string(f) + " \"" + feature.name + "\"";
    const std::string what = feature_id + ": ";
    if (feature.name.empty()) return Status::InvalidArgument(what + "empty name");
    if (!seen.insert(feature.name).second) return Status::InvalidArgument(what + "name used twice");
    if (feature.num_rows < 1) {
      return Status::InvalidArgument(what + "num_rows must be >= 1, got " + std::to_string(feature.num_rows));
    }
    if (feature.ids_per_bag < 0) {
      return Status::InvalidArgument(what + "ids_per_bag must be >= 0, got " + std::to_string(feature.ids_per_bag));
    }
    auto sampler = ZipfSampler::Create(feature.num_rows, feature.zipf);
    if (!sampler.ok()) return sampler.status().WithContext(feature_id);
    plans.push_back(FeaturePlan{
        .sampler = *sampler,
        .ids_per_bag = feature.ids_per_bag,
        .weighted = feature.weighted,
        .id_key = Key(options.seed, kIdTag, f),
        .weight_key = Key(options.seed, kWeightTag, f),
        .score_key = Key(options.seed, kScoreTag, f),
        .bag_scale = feature.ids_per_bag > 0 ? static_cast<float>(1.0 / std::sqrt(feature.ids_per_bag)) : 0.0f,
    });
  }
  return std::unique_ptr<DataSource>(new SyntheticSource(options, std::move(plans)));
}

}  // namespace tessera
