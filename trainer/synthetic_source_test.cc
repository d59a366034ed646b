#include "trainer/synthetic_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ctime>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "common/thread_cpu_time.h"

namespace tessera {
namespace {

SyntheticOptions MixedOptions(SyntheticLabels labels = SyntheticLabels::kLearnable) {
  SyntheticOptions o;
  o.num_examples = 10'000;
  o.num_dense = 5;
  o.seed = 17;
  o.labels = labels;
  o.features = {
      {.name = "user", .num_rows = 1'000'000'000, .ids_per_bag = 1, .zipf = 1.05},
      {.name = "items", .num_rows = 1000, .ids_per_bag = 4, .zipf = 0.0, .weighted = true},
      {.name = "empty", .num_rows = 10, .ids_per_bag = 0, .zipf = 1.0},
      {.name = "one_row", .num_rows = 1, .ids_per_bag = 3, .zipf = 1.5},
  };
  return o;
}

std::unique_ptr<DataSource> MustOpen(const SyntheticOptions& o) {
  auto source = OpenSynthetic(o);
  CHECK(source.ok()) << source.status();
  return std::move(source).value();
}

Batch MustRead(DataSource& s, int64_t begin, int64_t count) {
  Batch b;
  const Status st = s.Read(begin, count, &b);
  CHECK(st.ok()) << st;
  return b;
}

// The values, weights and lengths of example `i` of a batch, feature by feature.
struct Example {
  std::vector<float> dense;
  float label;
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> weights;
  bool operator==(const Example&) const = default;
};

Example ExampleOf(const Batch& b, int64_t i) {
  Example e;
  e.dense.assign(b.dense.begin() + i * b.num_dense, b.dense.begin() + (i + 1) * b.num_dense);
  e.label = b.labels[i];
  const std::vector<int64_t> starts = b.sparse.FeatureValueOffsets();
  for (int f = 0; f < b.sparse.num_keys(); ++f) {
    const std::vector<int64_t> bags = b.sparse.BagOffsets(f);
    const int64_t lo = starts[f] + bags[i], hi = starts[f] + bags[i + 1];
    e.ids.emplace_back(b.sparse.values.begin() + lo, b.sparse.values.begin() + hi);
    if (b.sparse.weighted()) e.weights.emplace_back(b.sparse.weights.begin() + lo, b.sparse.weights.begin() + hi);
  }
  return e;
}

TEST(SyntheticSourceTest, ShapesAndRanges) {
  const SyntheticOptions o = MixedOptions();
  auto s = MustOpen(o);
  EXPECT_EQ(s->num_examples(), 10'000);
  EXPECT_EQ(s->num_dense(), 5);
  EXPECT_EQ(s->feature_names(), (std::vector<std::string>{"user", "items", "empty", "one_row"}));
  const Batch b = MustRead(*s, 100, 512);
  EXPECT_EQ(b.first_example, 100);
  EXPECT_EQ(b.size, 512);
  EXPECT_EQ(b.num_dense, 5);
  ASSERT_TRUE(b.sparse.Validate().ok()) << b.sparse.Validate();
  EXPECT_EQ(b.sparse.keys, s->feature_names());
  ASSERT_EQ(b.dense.size(), 512u * 5);
  for (float x : b.dense) ASSERT_TRUE(x >= 0.0f && x < 1.0f) << x;
  for (float l : b.labels) ASSERT_TRUE(l == 0.0f || l == 1.0f) << l;
  ASSERT_TRUE(b.sparse.weighted());
  ASSERT_EQ(b.sparse.values.size(), 512u * 8);
  const std::vector<int64_t> starts = b.sparse.FeatureValueOffsets();
  for (int f = 0; f < 4; ++f) {
    for (int32_t len : b.sparse.FeatureLengths(f)) ASSERT_EQ(len, o.features[f].ids_per_bag);
    for (int64_t k = starts[f]; k < starts[f + 1]; ++k) {
      ASSERT_GE(b.sparse.values[k], 0);
      ASSERT_LT(b.sparse.values[k], o.features[f].num_rows);
      const float w = b.sparse.weights[k];
      if (o.features[f].weighted) {
        ASSERT_TRUE(w >= 0.5f && w < 1.5f) << w;
      } else {
        ASSERT_EQ(w, 1.0f);
      }
    }
  }
  // Bags of a single-row table hold id 0 only.
  for (int64_t k = starts[3]; k < starts[4]; ++k) ASSERT_EQ(b.sparse.values[k], 0);
}

TEST(SyntheticSourceTest, UnweightedHasNoWeightsAndNoDenseIsFine) {
  SyntheticOptions o;
  o.num_examples = 100;
  o.num_dense = 0;
  o.features = {{.name = "a", .num_rows = 100, .ids_per_bag = 2}};
  auto s = MustOpen(o);
  const Batch b = MustRead(*s, 0, 100);
  EXPECT_TRUE(b.dense.empty());
  EXPECT_FALSE(b.sparse.weighted());
  EXPECT_EQ(b.sparse.values.size(), 200u);
  EXPECT_TRUE(b.sparse.Validate().ok());
}

TEST(SyntheticSourceTest, ExamplesArePureFunctionsOfSeedAndIndex) {
  const SyntheticOptions o = MixedOptions();
  auto a = MustOpen(o);
  auto b = MustOpen(o);
  const Batch whole = MustRead(*a, 0, 300);
  // Another source, other ranges, another order of reads: the same examples.
  const Batch tail = MustRead(*b, 200, 100);
  const Batch mid = MustRead(*b, 37, 50);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(ExampleOf(tail, i), ExampleOf(whole, 200 + i)) << i;
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(ExampleOf(mid, i), ExampleOf(whole, 37 + i)) << i;
  for (int64_t i : {0, 1, 150, 299}) ASSERT_EQ(ExampleOf(MustRead(*b, i, 1), 0), ExampleOf(whole, i)) << i;

  // Another seed: other data.
  SyntheticOptions other = o;
  other.seed = 18;
  const Batch c = MustRead(*MustOpen(other), 0, 300);
  EXPECT_NE(c.sparse.values, whole.sparse.values);
  EXPECT_NE(c.dense, whole.dense);
}

TEST(SyntheticSourceTest, ReadBounds) {
  auto s = MustOpen(MixedOptions());
  Batch b;
  EXPECT_TRUE(s->Read(10'000, 0, &b).ok());
  EXPECT_EQ(b.size, 0);
  EXPECT_TRUE(b.sparse.Validate().ok());
  EXPECT_EQ(s->Read(9'999, 2, &b).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s->Read(-1, 1, &b).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s->Read(0, -1, &b).code(), StatusCode::kOutOfRange);
}

TEST(SyntheticSourceTest, ZipfHeadFrequency) {
  SyntheticOptions o;
  o.num_examples = 100'000;
  o.num_dense = 0;
  o.features = {{.name = "f", .num_rows = 1'000'000, .ids_per_bag = 2, .zipf = 1.0}};
  const Batch b = MustRead(*MustOpen(o), 0, 100'000);
  int64_t zeros = 0, ones = 0;
  for (int64_t v : b.sparse.values) {
    zeros += v == 0;
    ones += v == 1;
  }
  // P(0) = 1 / H(1e6) = 1 / 14.3927, P(1) = P(0) / 2; 200k draws.
  const double n = static_cast<double>(b.sparse.values.size());
  EXPECT_NEAR(zeros / n, 1.0 / 14.3927, 0.003);
  EXPECT_NEAR(ones / n, 0.5 / 14.3927, 0.003);
}

// Fits the simplest model that can use the ids: the mean label of each
// (feature, id) on a training range; predicts a held-out range by the sign of
// the summed deviations from the mean label. Returns its accuracy.
double IdMeanLabelAccuracy(SyntheticLabels labels) {
  SyntheticOptions o;
  o.num_examples = 30'000;
  o.num_dense = 2;
  o.seed = 3;
  o.labels = labels;
  o.features = {{.name = "a", .num_rows = 50, .ids_per_bag = 1, .zipf = 0.0},
                {.name = "b", .num_rows = 50, .ids_per_bag = 2, .zipf = 0.5}};
  auto s = MustOpen(o);
  const Batch train = MustRead(*s, 0, 25'000);
  const Batch test = MustRead(*s, 25'000, 5'000);
  // Fixed pooling: the ids of feature f, example i are values[start_f + i * k, + k).
  const auto ids = [&o](const Batch& b, int f, int64_t i) {
    const int64_t start = f == 0 ? 0 : b.size * o.features[0].ids_per_bag;
    const int k = o.features[f].ids_per_bag;
    return std::span<const int64_t>(b.sparse.values).subspan(start + i * k, k);
  };
  double sum[2][50] = {}, count[2][50] = {};
  double mean = 0;
  for (float l : train.labels) mean += l / train.size;
  for (int64_t i = 0; i < train.size; ++i) {
    for (int f = 0; f < 2; ++f) {
      for (int64_t id : ids(train, f, i)) {
        sum[f][id] += train.labels[i];
        count[f][id] += 1;
      }
    }
  }
  int64_t right = 0;
  for (int64_t i = 0; i < test.size; ++i) {
    double score = 0;
    for (int f = 0; f < 2; ++f) {
      for (int64_t id : ids(test, f, i)) {
        if (count[f][id] > 0) score += sum[f][id] / count[f][id] - mean;
      }
    }
    right += (score > 0) == (test.labels[i] == 1.0f);
  }
  return static_cast<double>(right) / test.size;
}

TEST(SyntheticSourceTest, LearnableLabelsCanBeLearned) {
  const double learnable = IdMeanLabelAccuracy(SyntheticLabels::kLearnable);
  const double random = IdMeanLabelAccuracy(SyntheticLabels::kRandom);
  std::cout << "held-out accuracy of per-id mean labels: learnable " << learnable << ", random " << random << "\n";
  EXPECT_GT(learnable, 0.7);
  EXPECT_NEAR(random, 0.5, 0.03);
}

TEST(SyntheticSourceTest, LabelBalance) {
  for (SyntheticLabels kind : {SyntheticLabels::kLearnable, SyntheticLabels::kRandom}) {
    SyntheticOptions o = MixedOptions(kind);
    // Without "one_row": a table of one row gives every example the same
    // score, a constant shift of the teacher's logit.
    o.features.pop_back();
    o.features.push_back({.name = "extra1", .num_rows = 100'000, .ids_per_bag = 5, .zipf = 0.8});
    o.features.push_back({.name = "extra2", .num_rows = 100'000, .ids_per_bag = 5, .zipf = 0.8});
    const Batch b = MustRead(*MustOpen(o), 0, 10'000);
    double ones = 0;
    for (float l : b.labels) ones += l;
    EXPECT_NEAR(ones / b.size, 0.5, kind == SyntheticLabels::kRandom ? 0.02 : 0.15);
  }
}

TEST(SyntheticSourceTest, Validation) {
  const auto expect_invalid = [](const SyntheticOptions& o, const std::string& needle) {
    auto s = OpenSynthetic(o);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status();
  };
  SyntheticOptions o = MixedOptions();
  o.num_examples = 0;
  expect_invalid(o, "num_examples");
  o = MixedOptions();
  o.num_dense = -1;
  expect_invalid(o, "num_dense");
  o = MixedOptions();
  o.features[1].num_rows = 0;
  expect_invalid(o, "num_rows");
  o = MixedOptions();
  o.features[1].ids_per_bag = -1;
  expect_invalid(o, "ids_per_bag");
  o = MixedOptions();
  o.features[0].zipf = -0.5;
  expect_invalid(o, "Zipf exponent");
  o = MixedOptions();
  o.features[0].zipf = NAN;
  expect_invalid(o, "Zipf exponent");
  o = MixedOptions();
  o.features[2].name = "user";
  expect_invalid(o, "name used twice");
  o = MixedOptions();
  o.features[2].name = "";
  expect_invalid(o, "empty name");
}

// Not a pass/fail test: prints the generation rate of the end-to-end
// benchmark's shape (512 examples x 20 ids per step), for the record.
TEST(SyntheticSourceTest, Throughput) {
  for (SyntheticLabels kind : {SyntheticLabels::kRandom, SyntheticLabels::kLearnable}) {
    SyntheticOptions o;
    o.num_examples = 1 << 30;
    o.num_dense = 13;
    o.labels = kind;
    for (int f = 0; f < 20; ++f) {
      o.features.push_back({.name = "f" + std::to_string(f), .num_rows = 100'000'000, .ids_per_bag = 1, .zipf = 1.05});
    }
    auto s = MustOpen(o);
    Batch b;
    const int steps = 1000;
    ASSERT_TRUE(s->Read(0, 512, &b).ok());  // warm up: allocate the batch
    // Thread CPU time, so that other processes on a shared machine do not count.
    const double start = ThreadCpuSeconds();
    for (int step = 0; step < steps; ++step) ASSERT_TRUE(s->Read(int64_t{step} * 512, 512, &b).ok());
    const double secs = ThreadCpuSeconds() - start;
    const double ids_per_s = steps * 512.0 * 20 / secs;
    std::cout << (kind == SyntheticLabels::kRandom ? "kRandom" : "kLearnable") << ": " << ids_per_s / 1e6
              << " M ids/s (" << steps << " reads of 512 examples x 20 features x 1 id, zipf 1.05, 1e8 rows, "
              << "+13 dense)\n";
    RecordProperty(kind == SyntheticLabels::kRandom ? "random_ids_per_s" : "learnable_ids_per_s",
                   std::to_string(ids_per_s));
  }
}

}  // namespace
}  // namespace tessera
