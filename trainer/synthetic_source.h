// A DataSource of generated examples, for benchmarks and for tests that need
// a model to learn something without a data file.
//
// Every example is a pure function of (seed, example index): dense values,
// ids, weights and label come from a counter-based generator (SplitMix64)
// keyed by (seed, feature, example, position), and ids from a Zipf sampler fed
// by that stream. Any trainer can produce example i alone, with no state and
// whatever it read before; two sources with the same options agree exactly.
//
//   dense    d_j ~ U(0, 1), 24-bit floats
//   ids      feature f, example i: ids_per_bag ids ~ Zipf(num_rows, zipf),
//            drawn independently (a bag may repeat an id)
//   weights  per id ~ U(0.5, 1.5) for a weighted feature. The KJT carries
//            weights for all values or none, so when any feature is weighted
//            the others get weight 1.
//   labels   kRandom: a fair coin per example (benchmarks).
//            kLearnable: a hidden teacher. Each (feature, id) has a fixed score
//            +-1 from a hash; a bag scores sum(weight * score) /
//            sqrt(ids_per_bag); the dense part is a fixed +-1 linear function
//            of the centred d_j scaled to unit variance; the logit is their sum
//            scaled to variance kTeacherScale^2 (when each bag's ids are
//            distinct), and label = 1 when logit + small logistic noise > 0.
//            The Bayes-optimal model is a DLRM-like sum of per-id embeddings
//            and a linear dense layer, so a model's loss falls as it sees the
//            frequent ids. About half the labels are 1, less evenly when a
//            few very hot ids (a steep Zipf, a tiny table) dominate the logit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data_source.h"

namespace tessera {

struct SyntheticFeature {
  // KJT key; non-empty and unique among the features.
  std::string name;
  // Rows of the feature's table: ids are in [0, num_rows). Up to 2^62 works
  // (the sampler needs O(1) memory).
  int64_t num_rows = 1'000'000;
  // Ids per example (fixed pooling factor). 0 gives empty bags.
  int ids_per_bag = 1;
  // Exponent s of P(id k) ~ (k + 1)^-s. 0: uniform; ~1.05: a long-tailed
  // popularity like click logs (higher: a hotter head, more cache hits).
  double zipf = 1.05;
  // Attach a per-id weight ~ U(0.5, 1.5) (weighted sum pooling).
  bool weighted = false;
};

enum class SyntheticLabels {
  // A learnable hidden teacher (see above): for convergence tests.
  kLearnable,
  // A fair coin: for benchmarks, where only the data movement matters.
  kRandom,
};

struct SyntheticOptions {
  // Examples in one epoch.
  int64_t num_examples = 1 << 20;
  // Dense features per example; may be 0.
  int num_dense = 13;
  // Sparse features, in KJT key order.
  std::vector<SyntheticFeature> features;
  // Different seeds give unrelated data sets (and unrelated teachers).
  uint64_t seed = 0;
  SyntheticLabels labels = SyntheticLabels::kLearnable;
};

// Standard deviation of the teacher logit of kLearnable (before noise), and
// the scale of the logistic noise added to it. The noise is small, so the
// label is mostly a function of the features.
inline constexpr double kTeacherScale = 2.0;
inline constexpr double kTeacherNoise = 0.5;

// Validates the options (InvalidArgument naming the bad field: num_examples <
// 1, num_dense < 0, an empty or repeated feature name, num_rows < 1,
// ids_per_bag < 0, a zipf exponent < 0 or not finite) and precomputes the
// per-feature sampler constants.
//
// Read() writes examples as a pure function of (seed, index); it is safe from
// one thread at a time (the DataSource contract), and in fact from several,
// since the source holds no mutable state.
StatusOr<std::unique_ptr<DataSource>> OpenSynthetic(const SyntheticOptions& options);

}  // namespace tessera
