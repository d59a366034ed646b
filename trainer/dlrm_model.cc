#include "trainer/dlrm_model.h"

#include <cmath>
#include <cstring>

#include <glog/logging.h>

#include "kernels/dense_ops.h"
#include "kernels/row_init.h"

namespace tessera {

DlrmModel::DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, uint64_t seed)
    : config_(config), feature_dims_(std::move(feature_dims)) {
  int64_t offset = 0;
  auto add = [&](std::vector<Layer>* layers, int in, int out, bool relu, const std::string& name) {
    Layer l;
    l.in = in;
    l.out = out;
    l.relu = relu;
    l.w = offset;
    offset += static_cast<int64_t>(in) * out;
    l.b = offset;
    offset += out;
    l.name = name;
    layers->push_back(l);
  };
  int width = config.num_dense_features;
  for (size_t i = 0; i < config.bottom_mlp.size(); ++i) {
    add(&bottom_, width, static_cast<int>(config.bottom_mlp[i]), true, "bottom." + std::to_string(i));
    width = static_cast<int>(config.bottom_mlp[i]);
  }
  interaction_width_ = width;
  for (int d : feature_dims_) interaction_width_ += d;
  width = static_cast<int>(interaction_width_);
  for (size_t i = 0; i < config.top_mlp.size(); ++i) {
    const bool last = i + 1 == config.top_mlp.size();
    add(&top_, width, static_cast<int>(config.top_mlp[i]), !last, "top." + std::to_string(i));
    width = static_cast<int>(config.top_mlp[i]);
  }
  CHECK_EQ(width, 1) << "the top MLP must end in one logit";
  params_.resize(offset);
  grads_.assign(offset, 0.0f);

  // torch.nn.Linear's law, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from a
  // counter-based generator keyed by (seed, layer).
  uint64_t layer_seed = kernels::SplitMix64(seed ^ 0xd15ea5e5ULL);
  for (auto* layers : {&bottom_, &top_}) {
    for (const Layer& l : *layers) {
      kernels::RowInitializer init;
      const float k = 1.0f / std::sqrt(static_cast<float>(std::max(l.in, 1)));
      init.a = -k;
      init.b = k;
      init.seed = layer_seed = kernels::SplitMix64(layer_seed);
      for (int64_t i = 0; i < static_cast<int64_t>(l.in) * l.out + l.out; ++i) {
        params_[l.w + i] = kernels::InitValue(init, i, 0);
      }
    }
  }
}

std::vector<DlrmModel::ParamInfo> DlrmModel::ParamInfos() const {
  std::vector<ParamInfo> out;
  for (const auto* layers : {&bottom_, &top_}) {
    for (const Layer& l : *layers) {
      out.push_back({l.name + ".weight", l.w, l.out, l.in});
      out.push_back({l.name + ".bias", l.b, 1, l.out});
    }
  }
  return out;
}

void DlrmModel::Forward(const float* dense, const std::vector<const float*>& features, int64_t batch) {
  CHECK_EQ(features.size(), feature_dims_.size());
  // Bottom MLP.
  bottom_acts_.resize(bottom_.size() + 1);
  bottom_acts_[0].assign(dense, dense + batch * config_.num_dense_features);
  for (size_t i = 0; i < bottom_.size(); ++i) {
    const Layer& l = bottom_[i];
    bottom_acts_[i + 1].resize(batch * l.out);
    kernels::LinearForward(bottom_acts_[i].data(), &params_[l.w], &params_[l.b], batch, l.in, l.out,
                           bottom_acts_[i + 1].data());
    kernels::ReluForward(bottom_acts_[i + 1].data(), batch * l.out);
  }
  // Interaction: concatenate per example.
  const std::vector<float>& bottom_out = bottom_acts_.back();
  const int64_t bw = bottom_.empty() ? config_.num_dense_features : bottom_.back().out;
  top_acts_.resize(top_.size() + 1);
  std::vector<float>& x = top_acts_[0];
  x.resize(batch * interaction_width_);
  for (int64_t b = 0; b < batch; ++b) {
    float* dst = &x[b * interaction_width_];
    std::memcpy(dst, bottom_out.data() + b * bw, sizeof(float) * bw);
    dst += bw;
    for (size_t f = 0; f < features.size(); ++f) {
      std::memcpy(dst, features[f] + b * feature_dims_[f], sizeof(float) * feature_dims_[f]);
      dst += feature_dims_[f];
    }
  }
  // Top MLP.
  for (size_t i = 0; i < top_.size(); ++i) {
    const Layer& l = top_[i];
    top_acts_[i + 1].resize(batch * l.out);
    kernels::LinearForward(top_acts_[i].data(), &params_[l.w], &params_[l.b], batch, l.in, l.out,
                           top_acts_[i + 1].data());
    if (l.relu) kernels::ReluForward(top_acts_[i + 1].data(), batch * l.out);
  }
}

void DlrmModel::Predict(const float* dense, const std::vector<const float*>& features, int64_t batch,
                        float* logits) {
  Forward(dense, features, batch);
  std::memcpy(logits, top_acts_.back().data(), sizeof(float) * batch);
}

double DlrmModel::ForwardBackward(const float* dense, const std::vector<const float*>& features,
                                  const float* labels, int64_t batch, float loss_scale,
                                  std::vector<std::vector<float>>* d_features) {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  d_features->resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) (*d_features)[f].assign(batch * feature_dims_[f], 0.0f);
  if (batch == 0) return 0.0;
  Forward(dense, features, batch);
  const float* logits = top_acts_.back().data();
  const double loss = kernels::SigmoidBceLossSum(logits, labels, batch);

  // Top MLP backward: dy_ holds the gradient of the current layer's output.
  dy_.resize(batch);
  kernels::SigmoidBceBackward(logits, labels, batch, loss_scale, dy_.data());
  for (size_t i = top_.size(); i-- > 0;) {
    const Layer& l = top_[i];
    if (l.relu) kernels::ReluBackward(top_acts_[i + 1].data(), dy_.data(), batch * l.out);
    dx_.resize(batch * l.in);
    kernels::LinearBackward(top_acts_[i].data(), &params_[l.w], dy_.data(), batch, l.in, l.out, &grads_[l.w],
                            &grads_[l.b], dx_.data());
    dy_.swap(dx_);
  }
  // dy_ is now d(interaction) [B x width]: split it.
  const int64_t bw = bottom_.empty() ? config_.num_dense_features : bottom_.back().out;
  std::vector<float> d_bottom(batch * bw);
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = &dy_[b * interaction_width_];
    std::memcpy(&d_bottom[b * bw], src, sizeof(float) * bw);
    src += bw;
    for (size_t f = 0; f < features.size(); ++f) {
      std::memcpy(&(*d_features)[f][b * feature_dims_[f]], src, sizeof(float) * feature_dims_[f]);
      src += feature_dims_[f];
    }
  }
  // Bottom MLP backward (no gradient for the raw dense features).
  dy_.swap(d_bottom);
  for (size_t i = bottom_.size(); i-- > 0;) {
    const Layer& l = bottom_[i];
    kernels::ReluBackward(bottom_acts_[i + 1].data(), dy_.data(), batch * l.out);
    float* dx = nullptr;
    if (i > 0) {
      dx_.resize(batch * l.in);
      dx = dx_.data();
    }
    kernels::LinearBackward(bottom_acts_[i].data(), &params_[l.w], dy_.data(), batch, l.in, l.out, &grads_[l.w],
                            &grads_[l.b], dx);
    if (i > 0) dy_.swap(dx_);
  }
  return loss;
}

}  // namespace tessera
