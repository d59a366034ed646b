// The dense model's gradients against finite differences of its own loss.
#include "trainer/dlrm_model.h"

#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "trainer/dense_optimizer.h"

namespace tessera {
namespace {

struct Batch {
  int64_t B = 5;
  std::vector<float> dense, labels;
  std::vector<std::vector<float>> features;
};

Batch MakeBatch(const ModelConfig& m, const std::vector<int>& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Batch b;
  b.dense.resize(b.B * m.num_dense_features);
  for (float& x : b.dense) x = u(rng);
  for (int64_t i = 0; i < b.B; ++i) b.labels.push_back(i % 2 ? 1.0f : 0.0f);
  for (int d : dims) {
    b.features.emplace_back(b.B * d);
    for (float& x : b.features.back()) x = u(rng);
  }
  return b;
}

std::vector<const float*> Ptrs(const Batch& b) {
  std::vector<const float*> p;
  for (const auto& f : b.features) p.push_back(f.data());
  return p;
}

double Loss(DlrmModel& model, const Batch& b) {
  std::vector<float> logits(b.B);
  const Status st = model.Predict(b.dense.data(), Ptrs(b), b.B, logits.data());
  CHECK(st.ok()) << st;
  double sum = 0;
  for (int64_t i = 0; i < b.B; ++i) {
    const double z = logits[i], y = b.labels[i];
    sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
  }
  return sum / b.B;
}

TEST(DlrmModelTest, GradientsMatchFiniteDifferences) {
  ModelConfig m;
  m.num_dense_features = 3;
  m.bottom_mlp = {6, 4};
  m.top_mlp = {5, 1};
  const std::vector<int> dims = {2, 3};
  DlrmModel model(m, dims, 7);
  EXPECT_EQ(model.interaction_width(), 4 + 2 + 3);
  const Batch b = MakeBatch(m, dims, 1);
  std::vector<std::vector<float>> d_features;
  StatusOr<double> loss = model.ForwardBackward(b.dense.data(), Ptrs(b), b.labels.data(), b.B, 1.0f / b.B, &d_features);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double loss_sum = *loss;
  EXPECT_NEAR(loss_sum / b.B, Loss(model, b), 1e-5);
  std::vector<float> grads(model.grads().begin(), model.grads().end());

  const double h = 1e-3;
  for (int64_t i = 0; i < model.num_params(); ++i) {
    float& p = model.params()[i];
    const float saved = p;
    p = saved + h;
    const double up = Loss(model, b);
    p = saved - h;
    const double down = Loss(model, b);
    p = saved;
    EXPECT_NEAR(grads[i], (up - down) / (2 * h), 2e-3) << "param " << i;
  }
  // And the gradient with respect to the pooled embeddings.
  Batch moved = b;
  for (size_t f = 0; f < dims.size(); ++f) {
    for (size_t k = 0; k < moved.features[f].size(); ++k) {
      const float saved = moved.features[f][k];
      moved.features[f][k] = saved + h;
      const double up = Loss(model, moved);
      moved.features[f][k] = saved - h;
      const double down = Loss(model, moved);
      moved.features[f][k] = saved;
      EXPECT_NEAR(d_features[f][k], (up - down) / (2 * h), 2e-3) << "feature " << f << " element " << k;
    }
  }
}

// Avazu and MovieLens have no dense features: no bottom MLP, and the batch's
// dense values are no buffer at all (a null pointer, which the copies into
// the interaction must not hand to memcpy: UBSan found that in the trainer).
TEST(DlrmModelTest, AModelWithoutDenseFeaturesTrainsOnItsEmbeddingsAlone) {
  ModelConfig m;
  m.num_dense_features = 0;
  m.top_mlp = {6, 1};
  const std::vector<int> dims = {3, 2};
  DlrmModel model(m, dims, 11);
  EXPECT_EQ(model.interaction_width(), 3 + 2);
  Batch b = MakeBatch(m, dims, 4);
  ASSERT_TRUE(b.dense.empty());
  OptimizerSpec spec;
  spec.lr = 0.5;
  auto opt = DenseOptimizer::Create(spec, model.num_params());
  ASSERT_TRUE(opt.ok()) << opt.status();
  const double before = Loss(model, b);
  std::vector<std::vector<float>> d;
  for (int i = 0; i < 50; ++i) {
    auto loss = model.ForwardBackward(nullptr, Ptrs(b), b.labels.data(), b.B, 1.0f / b.B, &d);
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(opt->Step(model.params(), model.grads()).ok());
  }
  EXPECT_LT(Loss(model, b), 0.5 * before);
  ASSERT_EQ(d.size(), dims.size());
  for (size_t f = 0; f < dims.size(); ++f) EXPECT_EQ(d[f].size(), static_cast<size_t>(b.B * dims[f]));
}

TEST(DlrmModelTest, SameSeedSameReplicaAndTrainingLowersLoss) {
  ModelConfig m;
  m.num_dense_features = 4;
  m.bottom_mlp = {8};
  m.top_mlp = {8, 1};
  DlrmModel a(m, {4}, 3), b(m, {4}, 3), c(m, {4}, 4);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  EXPECT_FALSE(std::equal(a.params().begin(), a.params().end(), c.params().begin()));
  for (float w : a.params()) EXPECT_LE(std::fabs(w), 1.0f / std::sqrt(4.0f) + 1e-6);

  const Batch batch = MakeBatch(m, {4}, 2);
  OptimizerSpec spec;
  spec.lr = 0.5;
  auto opt = DenseOptimizer::Create(spec, a.num_params());
  ASSERT_TRUE(opt.ok());
  const double before = Loss(a, batch);
  std::vector<std::vector<float>> d;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(a.ForwardBackward(batch.dense.data(), Ptrs(batch), batch.labels.data(), batch.B, 1.0f / batch.B, &d)
                    .ok());
    ASSERT_TRUE(opt->Step(a.params(), a.grads()).ok());
  }
  EXPECT_LT(Loss(a, batch), 0.5 * before);
}

// Checkpoints and dumps go through the host copies on every backend.
// The training loop pushes the embedding gradients from features_ready and
// allreduces each layer's gradients from grads_ready while the backward goes
// on: what each hook sees must already be final, the ranges must cover the
// buffer from its end, and the hooks must change no value.
TEST(DlrmModelTest, BackwardHooksSeeFinalValuesInOrderAndChangeNothing) {
  ModelConfig m;
  m.num_dense_features = 3;
  m.bottom_mlp = {6, 4};
  m.top_mlp = {8, 5, 1};
  const std::vector<int> dims = {2, 3};
  const Batch b = MakeBatch(m, dims, 11);
  DlrmModel plain(m, dims, 7), hooked(m, dims, 7);

  std::vector<std::vector<float>> d_plain, d_hooked;
  auto loss_plain = plain.ForwardBackward(b.dense.data(), Ptrs(b), b.labels.data(), b.B, 0.5f, &d_plain);
  ASSERT_TRUE(loss_plain.ok()) << loss_plain.status();

  std::vector<std::string> events;
  std::vector<std::vector<float>> features_seen;
  std::vector<float> grads_seen(hooked.num_params(), std::nanf(""));
  int64_t next_end = hooked.num_params();
  DlrmModel::BackwardHooks hooks;
  hooks.features_ready = [&]() -> Status {
    events.push_back("features");
    features_seen = d_hooked;
    return Status::OK();
  };
  hooks.grads_ready = [&](int64_t offset, int64_t count) -> Status {
    events.push_back("grads");
    EXPECT_EQ(offset + count, next_end) << "ranges from the end, adjacent";
    next_end = offset;
    for (int64_t i = offset; i < offset + count; ++i) grads_seen[i] = hooked.grads()[i];
    return Status::OK();
  };
  auto loss_hooked =
      hooked.ForwardBackward(b.dense.data(), Ptrs(b), b.labels.data(), b.B, 0.5f, &d_hooked, &hooks);
  ASSERT_TRUE(loss_hooked.ok()) << loss_hooked.status();

  EXPECT_EQ(*loss_plain, *loss_hooked);
  EXPECT_EQ(next_end, 0) << "the ranges cover every gradient";
  EXPECT_EQ(events, (std::vector<std::string>{"features", "grads", "grads", "grads", "grads", "grads"}));
  EXPECT_EQ(d_hooked, d_plain);
  EXPECT_EQ(features_seen, d_plain);
  const std::vector<float> final_grads(plain.grads().begin(), plain.grads().end());
  EXPECT_EQ(std::vector<float>(hooked.grads().begin(), hooked.grads().end()), final_grads);
  EXPECT_EQ(grads_seen, final_grads);

  // An error from a hook ends the pass with it.
  hooks.features_ready = [] { return Status::Unavailable("server gone"); };
  auto failed = hooked.ForwardBackward(b.dense.data(), Ptrs(b), b.labels.data(), b.B, 0.5f, &d_hooked, &hooks);
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);

  // An empty share reports the same ranges, so its peers' allreduces pair up.
  events.clear();
  next_end = hooked.num_params();
  hooks.features_ready = [&]() -> Status {
    events.push_back("features");
    return Status::OK();
  };
  auto empty = hooked.ForwardBackward(nullptr, std::vector<const float*>(dims.size(), nullptr), nullptr, 0, 0.5f,
                                      &d_hooked, &hooks);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(events, (std::vector<std::string>{"features", "grads", "grads", "grads", "grads", "grads"}));
  EXPECT_EQ(next_end, 0);
}

TEST(DlrmModelTest, ParamsRoundTripThroughTheHost) {
  ModelConfig m;
  m.num_dense_features = 2;
  m.bottom_mlp = {3};
  m.top_mlp = {2, 1};
  DlrmModel a(m, {2}, 5), b(m, {2}, 6);
  StatusOr<std::vector<float>> params = a.CopyParamsToHost();
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_TRUE(std::equal(params->begin(), params->end(), a.params().begin(), a.params().end()));
  ASSERT_TRUE(b.LoadParams(*params).ok());
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin(), b.params().end()));
  EXPECT_EQ(b.LoadParams(std::vector<float>(3)).code(), StatusCode::kInvalidArgument);
}

TEST(DenseOptimizerTest, StateRoundTripsAndRejectsAWrongSize) {
  OptimizerSpec spec;
  spec.type = "adam";
  auto opt = DenseOptimizer::Create(spec, 4);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> params = {1, 2, 3, 4}, grads = {0.5f, -0.5f, 0.25f, 0};
  ASSERT_TRUE(opt->Step(params, grads).ok());
  StatusOr<std::vector<float>> state = opt->CopyStateToHost();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->size(), 8u);
  EXPECT_FLOAT_EQ((*state)[0], 0.1f * 0.5f);  // m = (1 - beta1) g after one step
  auto other = DenseOptimizer::Create(spec, 4);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->Restore(*state, opt->steps()).ok());
  EXPECT_EQ(*other->CopyStateToHost(), *state);
  EXPECT_EQ(other->Restore(std::vector<float>(3), 1).code(), StatusCode::kInvalidArgument);
}

TEST(DenseOptimizerTest, RejectsRowWiseAdagrad) {
  OptimizerSpec spec;
  spec.type = "rowwise_adagrad";
  EXPECT_EQ(DenseOptimizer::Create(spec, 10).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
