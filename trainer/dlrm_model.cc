#include "trainer/dlrm_model.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <glog/logging.h>

#include "kernels/row_init.h"

namespace tessera {

DlrmModel::DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, DenseBackend* backend)
    : config_(config), feature_dims_(std::move(feature_dims)), backend_(backend) {}

DlrmModel::DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, uint64_t seed)
    : config_(config), feature_dims_(std::move(feature_dims)), owned_backend_(NewCpuDenseBackend()) {
  backend_ = owned_backend_.get();
  const Status s = Init(seed);
  CHECK(s.ok()) << s;  // host memory: only a broken invariant fails here
}

StatusOr<std::unique_ptr<DlrmModel>> DlrmModel::Create(const ModelConfig& config, std::vector<int> feature_dims,
                                                       uint64_t seed, DenseBackend* backend) {
  std::unique_ptr<DlrmModel> model(new DlrmModel(config, std::move(feature_dims), backend));
  TESSERA_RETURN_IF_ERROR(model->Init(seed));
  return model;
}

Status DlrmModel::Init(uint64_t seed) {
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
  int width = config_.num_dense_features;
  for (size_t i = 0; i < config_.bottom_mlp.size(); ++i) {
    add(&bottom_, width, static_cast<int>(config_.bottom_mlp[i]), true, "bottom." + std::to_string(i));
    width = static_cast<int>(config_.bottom_mlp[i]);
  }
  interaction_width_ = width;
  for (int d : feature_dims_) interaction_width_ += d;
  width = static_cast<int>(interaction_width_);
  for (size_t i = 0; i < config_.top_mlp.size(); ++i) {
    const bool last = i + 1 == config_.top_mlp.size();
    add(&top_, width, static_cast<int>(config_.top_mlp[i]), !last, "top." + std::to_string(i));
    width = static_cast<int>(config_.top_mlp[i]);
  }
  CHECK_EQ(width, 1) << "the top MLP must end in one logit";

  // torch.nn.Linear's law, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from a
  // counter-based generator keyed by (seed, layer). Made on the host, then
  // copied to the backend.
  std::vector<float> initial(offset);
  uint64_t layer_seed = kernels::SplitMix64(seed ^ 0xd15ea5e5ULL);
  for (auto* layers : {&bottom_, &top_}) {
    for (const Layer& l : *layers) {
      kernels::RowInitializer init;
      const float k = 1.0f / std::sqrt(static_cast<float>(std::max(l.in, 1)));
      init.a = -k;
      init.b = k;
      init.seed = layer_seed = kernels::SplitMix64(layer_seed);
      for (int64_t i = 0; i < static_cast<int64_t>(l.in) * l.out + l.out; ++i) {
        initial[l.w + i] = kernels::InitValue(init, i, 0);
      }
    }
  }
  params_ = backend_->NewArray();
  grads_ = backend_->NewArray();
  TESSERA_RETURN_IF_ERROR(params_->Resize(offset));
  TESSERA_RETURN_IF_ERROR(grads_->Resize(offset));
  TESSERA_RETURN_IF_ERROR(backend_->Zero(grads_->data(), offset));
  TESSERA_RETURN_IF_ERROR(LoadParams(initial));

  for (size_t i = 0; i <= bottom_.size(); ++i) bottom_acts_.push_back(backend_->NewArray());
  for (size_t i = 0; i <= top_.size(); ++i) top_acts_.push_back(backend_->NewArray());
  for (size_t i = 0; i < bottom_.size(); ++i) bottom_dys_.push_back(backend_->NewArray());
  for (size_t i = 0; i < top_.size(); ++i) top_dys_.push_back(backend_->NewArray());
  labels_ = backend_->NewArray();
  d_interaction_ = backend_->NewArray();
  return backend_->Synchronize();
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

StatusOr<std::vector<float>> DlrmModel::CopyParamsToHost() {
  std::vector<float> host(params_->size());
  TESSERA_RETURN_IF_ERROR(backend_->CopyToHost(params_->data(), params_->size(), host.data()));
  return host;
}

Status DlrmModel::LoadParams(std::span<const float> host) {
  if (static_cast<int64_t>(host.size()) != params_->size()) {
    return Status::InvalidArgument("dense parameters: got " + std::to_string(host.size()) + " floats, the model has " +
                                   std::to_string(params_->size()));
  }
  TESSERA_RETURN_IF_ERROR(backend_->CopyFromHost(host.data(), params_->size(), params_->data()));
  // The caller's buffer may go away as soon as this returns.
  return backend_->Synchronize();
}

int64_t DlrmModel::BottomWidth() const {
  return bottom_.empty() ? config_.num_dense_features : bottom_.back().out;
}

Status DlrmModel::Forward(const float* dense, const std::vector<const float*>& features, int64_t batch) {
  CHECK_EQ(features.size(), feature_dims_.size());
  // Bottom MLP.
  TESSERA_RETURN_IF_ERROR(bottom_acts_[0]->Resize(batch * config_.num_dense_features));
  TESSERA_RETURN_IF_ERROR(backend_->CopyFromHost(dense, batch * config_.num_dense_features, bottom_acts_[0]->data()));
  for (size_t i = 0; i < bottom_.size(); ++i) {
    const Layer& l = bottom_[i];
    TESSERA_RETURN_IF_ERROR(bottom_acts_[i + 1]->Resize(batch * l.out));
    float* y = bottom_acts_[i + 1]->data();
    TESSERA_RETURN_IF_ERROR(backend_->LinearForward(bottom_acts_[i]->data(), param(l.w), param(l.b), batch, l.in,
                                                    l.out, y));
    TESSERA_RETURN_IF_ERROR(backend_->ReluForward(y, batch * l.out));
  }
  // Interaction: [bottom output | feature 0 | feature 1 | ...] per example.
  const int64_t bw = BottomWidth();
  DenseArray& x = *top_acts_[0];
  TESSERA_RETURN_IF_ERROR(x.Resize(batch * interaction_width_));
  TESSERA_RETURN_IF_ERROR(
      backend_->CopyMatrix(bottom_acts_.back()->data(), bw, x.data(), interaction_width_, batch, bw));
  std::vector<HostColumns> blocks;
  for (size_t f = 0; f < features.size(); ++f) blocks.push_back({features[f], feature_dims_[f]});
  TESSERA_RETURN_IF_ERROR(backend_->ScatterFromHost(blocks, batch, x.data() + bw, interaction_width_));
  // Top MLP.
  for (size_t i = 0; i < top_.size(); ++i) {
    const Layer& l = top_[i];
    TESSERA_RETURN_IF_ERROR(top_acts_[i + 1]->Resize(batch * l.out));
    float* y = top_acts_[i + 1]->data();
    TESSERA_RETURN_IF_ERROR(
        backend_->LinearForward(top_acts_[i]->data(), param(l.w), param(l.b), batch, l.in, l.out, y));
    if (l.relu) TESSERA_RETURN_IF_ERROR(backend_->ReluForward(y, batch * l.out));
  }
  return Status::OK();
}

Status DlrmModel::Predict(const float* dense, const std::vector<const float*>& features, int64_t batch,
                          float* logits) {
  if (batch == 0) return Status::OK();
  TESSERA_RETURN_IF_ERROR(Forward(dense, features, batch));
  return backend_->CopyToHost(top_acts_.back()->data(), batch, logits);
}

StatusOr<double> DlrmModel::ForwardBackward(const float* dense, const std::vector<const float*>& features,
                                            const float* labels, int64_t batch, float loss_scale,
                                            std::vector<std::vector<float>>* d_features, const BackwardHooks* hooks) {
  CHECK(hooks == nullptr || !on_device()) << "backward hooks need gradients in host memory";
  TESSERA_RETURN_IF_ERROR(backend_->Zero(grads_->data(), grads_->size()));
  d_features->resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) (*d_features)[f].assign(batch * feature_dims_[f], 0.0f);
  if (batch == 0) {
    TESSERA_RETURN_IF_ERROR(backend_->Synchronize());
    // Every trainer reports the same ranges every step, an empty share too:
    // the others' collective waits for them.
    if (hooks != nullptr && hooks->features_ready) TESSERA_RETURN_IF_ERROR(hooks->features_ready());
    if (hooks != nullptr && hooks->grads_ready) {
      for (const auto* layers : {&top_, &bottom_}) {
        for (size_t i = layers->size(); i-- > 0;) {
          const Layer& l = (*layers)[i];
          TESSERA_RETURN_IF_ERROR(hooks->grads_ready(l.w, l.b + l.out - l.w));
        }
      }
    }
    return 0.0;
  }
  TESSERA_RETURN_IF_ERROR(Forward(dense, features, batch));
  TESSERA_RETURN_IF_ERROR(labels_->Resize(batch));
  TESSERA_RETURN_IF_ERROR(backend_->CopyFromHost(labels, batch, labels_->data()));
  const float* logits = top_acts_.back()->data();
  TESSERA_RETURN_IF_ERROR(backend_->SigmoidBceLossSum(logits, labels_->data(), batch));

  // First the inputs' gradients, layer by layer down to the interaction and
  // through the bottom MLP; then the weights' (each layer's depends only on
  // its own input and output gradient, so the order changes no value). The
  // features' gradients are so final after half the backward's work.
  TESSERA_RETURN_IF_ERROR(top_dys_.back()->Resize(batch));
  TESSERA_RETURN_IF_ERROR(
      backend_->SigmoidBceBackward(logits, labels_->data(), batch, loss_scale, top_dys_.back()->data()));
  for (size_t i = top_.size(); i-- > 0;) {
    const Layer& l = top_[i];
    float* dy = top_dys_[i]->data();
    if (l.relu) TESSERA_RETURN_IF_ERROR(backend_->ReluBackward(top_acts_[i + 1]->data(), dy, batch * l.out));
    DenseArray& dx = i > 0 ? *top_dys_[i - 1] : *d_interaction_;
    TESSERA_RETURN_IF_ERROR(dx.Resize(batch * l.in));
    TESSERA_RETURN_IF_ERROR(backend_->LinearBackward(top_acts_[i]->data(), param(l.w), dy, batch, l.in, l.out,
                                                     nullptr, nullptr, dx.data()));
  }
  // d_interaction_ [B x width]: the bottom MLP's part goes on into its
  // backward; the features' part goes to the host.
  const int64_t bw = BottomWidth();
  if (!bottom_.empty()) {
    TESSERA_RETURN_IF_ERROR(bottom_dys_.back()->Resize(batch * bw));
    TESSERA_RETURN_IF_ERROR(
        backend_->CopyMatrix(d_interaction_->data(), interaction_width_, bottom_dys_.back()->data(), bw, batch, bw));
  }
  // No gradient for the raw dense features: the first layer has no input
  // gradient to take.
  for (size_t i = bottom_.size(); i-- > 0;) {
    const Layer& l = bottom_[i];
    float* dy = bottom_dys_[i]->data();
    TESSERA_RETURN_IF_ERROR(backend_->ReluBackward(bottom_acts_[i + 1]->data(), dy, batch * l.out));
    if (i == 0) break;
    TESSERA_RETURN_IF_ERROR(bottom_dys_[i - 1]->Resize(batch * l.in));
    TESSERA_RETURN_IF_ERROR(backend_->LinearBackward(bottom_acts_[i]->data(), param(l.w), dy, batch, l.in, l.out,
                                                     nullptr, nullptr, bottom_dys_[i - 1]->data()));
  }
  std::vector<MutableHostColumns> blocks;
  for (size_t f = 0; f < features.size(); ++f) blocks.push_back({(*d_features)[f].data(), feature_dims_[f]});
  const bool early_features = hooks != nullptr && static_cast<bool>(hooks->features_ready);
  if (early_features) {
    TESSERA_RETURN_IF_ERROR(backend_->GatherToHost(d_interaction_->data() + bw, interaction_width_, batch, blocks));
    TESSERA_RETURN_IF_ERROR(hooks->features_ready());
  }
  for (const auto& [layers, acts, dys] : {std::tuple{&top_, &top_acts_, &top_dys_},
                                          std::tuple{&bottom_, &bottom_acts_, &bottom_dys_}}) {
    for (size_t i = layers->size(); i-- > 0;) {
      const Layer& l = (*layers)[i];
      TESSERA_RETURN_IF_ERROR(backend_->LinearBackward((*acts)[i]->data(), param(l.w), (*dys)[i]->data(), batch,
                                                       l.in, l.out, grad(l.w), grad(l.b), nullptr));
      if (hooks != nullptr && hooks->grads_ready) TESSERA_RETURN_IF_ERROR(hooks->grads_ready(l.w, l.b + l.out - l.w));
    }
  }
  if (!early_features) {
    // On a GPU the one wait of the step comes after all its work is queued:
    // the feature gradients and the loss are on the host after it.
    TESSERA_RETURN_IF_ERROR(backend_->GatherToHost(d_interaction_->data() + bw, interaction_width_, batch, blocks));
  }
  return backend_->LossSum();
}

}  // namespace tessera
