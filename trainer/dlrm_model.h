// The dense part of a DLRM-style model, replicated on every trainer:
//
//   bottom MLP (ReLU after every layer) on the dense features
//   concatenate [bottom output, pooled embedding of each feature]
//   top MLP (ReLU between layers) -> one logit -> BCE-with-logits
//
// All parameters live in one flat buffer (and their gradients in another), so
// the dense allreduce is a single call and the optimizer one loop. The
// initialization is U(+-1/sqrt(fan_in)) for weights and biases (torch's
// Linear default), a pure function of (seed, layer, index): every trainer
// starts with the same replica without a broadcast.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/job_config.h"

namespace tessera {

class DlrmModel {
 public:
  // feature_dims: embedding width of each feature, in interaction order.
  DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, uint64_t seed);

  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  int64_t interaction_width() const { return interaction_width_; }

  // One forward and backward pass over a batch of B examples:
  //   dense     [B x num_dense_features]
  //   features  per feature, [B x dim_f] pooled embeddings
  //   labels    [B]
  // Gradients are of loss_scale * (sum of per-example losses): pass
  // 1 / (examples in the global batch) for the mean over all trainers.
  // Overwrites grads() and d_features (resized to [B x dim_f] each).
  // Returns the sum of the per-example losses (unscaled).
  double ForwardBackward(const float* dense, const std::vector<const float*>& features, const float* labels,
                         int64_t batch, float loss_scale, std::vector<std::vector<float>>* d_features);

  // Logits of a batch, [B].
  void Predict(const float* dense, const std::vector<const float*>& features, int64_t batch, float* logits);

  // Names and shapes of the parameters, for dumps: "bottom.0.weight" [out x in], ...
  struct ParamInfo {
    std::string name;
    int64_t offset, rows, cols;
  };
  std::vector<ParamInfo> ParamInfos() const;

 private:
  struct Layer {
    int in = 0, out = 0;
    int64_t w = 0, b = 0;  // offsets into params_/grads_
    bool relu = true;
    std::string name;
  };
  // Runs the layers; acts_[i] holds layer i's input (acts_.back() the logits).
  void Forward(const float* dense, const std::vector<const float*>& features, int64_t batch);

  ModelConfig config_;
  std::vector<int> feature_dims_;
  int64_t interaction_width_ = 0;
  std::vector<Layer> bottom_, top_;
  std::vector<float> params_, grads_;
  // Activations of the last forward: bottom_acts_[i] = input of bottom layer i,
  // top_acts_[i] = input of top layer i; the last entry of each = its output.
  std::vector<std::vector<float>> bottom_acts_, top_acts_;
  std::vector<float> dy_, dx_;
};

}  // namespace tessera
