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
//
// The model computes on a DenseBackend (trainer/dense_backend.h): parameters,
// gradients and activations are in its memory (device memory on a GPU). The
// batch comes from the host and the pooled-feature gradients go back to it,
// since both travel over ZeroMQ. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/job_config.h"
#include "common/status.h"
#include "trainer/dense_backend.h"

namespace tessera {

class DlrmModel {
 public:
  // feature_dims: embedding width of each feature, in interaction order.
  // `backend` must outlive the model.
  static StatusOr<std::unique_ptr<DlrmModel>> Create(const ModelConfig& config, std::vector<int> feature_dims,
                                                     uint64_t seed, DenseBackend* backend);
  // The same on a CPU backend of its own (host memory cannot fail to allocate).
  DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, uint64_t seed);

  DlrmModel(const DlrmModel&) = delete;
  DlrmModel& operator=(const DlrmModel&) = delete;

  // In the backend's memory: host memory on the CPU (read and written
  // directly by tests), device memory on a GPU (for the collective and the
  // optimizer; use CopyParamsToHost / LoadParams from the host).
  std::span<float> params() { return params_->span(); }
  std::span<float> grads() { return grads_->span(); }
  DenseBackend* backend() const { return backend_; }
  bool on_device() const { return backend_->on_device(); }
  int64_t num_params() const { return params_->size(); }
  int64_t interaction_width() const { return interaction_width_; }

  // The parameters on the host, in the flat layout of ParamInfos (checkpoints
  // and dumps), and back. LoadParams fails on a size mismatch.
  StatusOr<std::vector<float>> CopyParamsToHost();
  Status LoadParams(std::span<const float> host);

  // What the training loop does with a step's gradients while the rest of
  // the backward pass computes (host backends only: on a device the
  // gradients are not final until the step's one wait). Called on the
  // calling thread; an error from either ends ForwardBackward with it.
  struct BackwardHooks {
    // Once d_features are final, before any weight gradient is computed
    // (the backward takes all inputs' gradients first): the embedding
    // gradients can leave while the dense ones are computed.
    std::function<Status()> features_ready;
    // Each layer's gradients [offset, offset + count) of grads() once final,
    // the top MLP's last layer first: the ranges come from the end of
    // grads() toward its start, adjacent, each once.
    std::function<Status(int64_t offset, int64_t count)> grads_ready;
  };

  // One forward and backward pass over a batch of B examples (host memory):
  //   dense     [B x num_dense_features]
  //   features  per feature, [B x dim_f] pooled embeddings
  //   labels    [B]
  // Gradients are of loss_scale * (sum of per-example losses): pass
  // 1 / (examples in the global batch) for the mean over all trainers.
  // Overwrites grads() and d_features (resized to [B x dim_f] each, host).
  // Returns the sum of the per-example losses (unscaled). All work is done
  // when it returns.
  // `hooks` may be null.
  StatusOr<double> ForwardBackward(const float* dense, const std::vector<const float*>& features, const float* labels,
                                   int64_t batch, float loss_scale, std::vector<std::vector<float>>* d_features,
                                   const BackwardHooks* hooks = nullptr);

  // Logits of a batch, [B], into host memory.
  Status Predict(const float* dense, const std::vector<const float*>& features, int64_t batch, float* logits);

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
  DlrmModel(const ModelConfig& config, std::vector<int> feature_dims, DenseBackend* backend);
  // Lays out the layers, allocates and initializes the parameters.
  Status Init(uint64_t seed);
  // Runs the layers; top_acts_.back() holds the logits.
  Status Forward(const float* dense, const std::vector<const float*>& features, int64_t batch);
  // Width of the bottom MLP's output (the dense features when it is empty).
  int64_t BottomWidth() const;
  float* param(int64_t offset) { return params_->data() + offset; }
  float* grad(int64_t offset) { return grads_->data() + offset; }

  ModelConfig config_;
  std::vector<int> feature_dims_;
  std::unique_ptr<DenseBackend> owned_backend_;  // the CPU constructor's
  DenseBackend* backend_;
  int64_t interaction_width_ = 0;
  std::vector<Layer> bottom_, top_;
  std::unique_ptr<DenseArray> params_, grads_;
  // Activations of the last forward: bottom_acts_[i] = input of bottom layer i,
  // top_acts_[i] = input of top layer i; the last entry of each = its output.
  std::vector<std::unique_ptr<DenseArray>> bottom_acts_, top_acts_;
  // Gradients of each layer's output (after its ReLU's backward), kept until
  // the layer's weight gradients are taken: bottom_dys_[i], top_dys_[i].
  std::vector<std::unique_ptr<DenseArray>> bottom_dys_, top_dys_;
  // labels_: the batch's labels; d_interaction_: gradient of the
  // concatenation [B x width].
  std::unique_ptr<DenseArray> labels_, d_interaction_;
};

}  // namespace tessera
