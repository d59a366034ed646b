#include "tests/reference/reference_trainer.h"

#include <algorithm>
#include <cmath>

#include "kernels/row_init.h"
#include "trainer/data_factory.h"
#include "trainer/dlrm_model.h"

namespace tessera {
namespace {

int StateFloats(const std::string& type, int dim) {
  if (type == "adagrad") return dim;
  if (type == "rowwise_adagrad") return 1;
  if (type == "adam") return 2 * dim + 1;
  return 0;
}

// One Linear layer, torch layout W [out x in], in double.
struct Layer {
  int in, out;
  size_t w, b;
  bool relu;
};

void SparseStep(const OptimizerSpec& o, int dim, float* row, const std::vector<double>& grad) {
  const double lr = o.lr, eps = o.eps, wd = o.weight_decay;
  std::vector<double> g(dim);
  for (int c = 0; c < dim; ++c) g[c] = grad[c] + wd * row[c];
  float* state = row + dim;
  if (o.type == "sgd") {
    for (int c = 0; c < dim; ++c) row[c] = static_cast<float>(row[c] - lr * g[c]);
  } else if (o.type == "adagrad") {
    for (int c = 0; c < dim; ++c) {
      state[c] = static_cast<float>(state[c] + g[c] * g[c]);
      row[c] = static_cast<float>(row[c] - lr * g[c] / (std::sqrt(static_cast<double>(state[c])) + eps));
    }
  } else if (o.type == "rowwise_adagrad") {
    double sq = 0;
    for (int c = 0; c < dim; ++c) sq += g[c] * g[c];
    state[0] = static_cast<float>(state[0] + sq / dim);
    const double mult = lr / (std::sqrt(static_cast<double>(state[0])) + eps);
    for (int c = 0; c < dim; ++c) row[c] = static_cast<float>(row[c] - mult * g[c]);
  } else {  // adam, with the row's own step count
    float* m = state;
    float* v = state + dim;
    float& step = state[2 * dim];
    step += 1;
    const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
    for (int c = 0; c < dim; ++c) {
      m[c] = static_cast<float>(o.beta1 * m[c] + (1 - o.beta1) * g[c]);
      v[c] = static_cast<float>(o.beta2 * v[c] + (1 - o.beta2) * g[c] * g[c]);
      row[c] = static_cast<float>(row[c] - lr / bc1 * m[c] / (std::sqrt(v[c] / bc2) + eps));
    }
  }
}

}  // namespace

StatusOr<ReferenceResult> TrainReference(const JobConfig& job, int64_t global_batch, int64_t steps) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, OpenTrainingData(job));
  ReferenceResult r;

  // Whole tables, initialized as the servers would initialize each row.
  for (const TableConfig& t : job.tables) {
    const int width = t.embedding_dim + StateFloats(t.optimizer.type, t.embedding_dim);
    kernels::RowInitializer init;
    init.seed = t.seed;
    if (t.initializer.type == "normal") {
      init.kind = kernels::InitKind::kNormal;
      init.a = static_cast<float>(t.initializer.mean);
      init.b = static_cast<float>(t.initializer.std);
    } else if (t.initializer.type == "zeros") {
      init.kind = kernels::InitKind::kZeros;
    } else {
      init.a = static_cast<float>(t.initializer.low);
      init.b = static_cast<float>(t.initializer.high);
    }
    std::vector<float> table(t.num_embeddings * width, 0.0f);
    for (int64_t row = 0; row < t.num_embeddings; ++row) {
      for (int c = 0; c < t.embedding_dim; ++c) table[row * width + c] = kernels::InitValue(init, row, c);
      if (t.optimizer.type == "adagrad" || t.optimizer.type == "rowwise_adagrad") {
        for (int c = t.embedding_dim; c < width; ++c) {
          table[row * width + c] = static_cast<float>(t.optimizer.initial_accumulator);
        }
      }
    }
    r.tables.push_back(std::move(table));
    r.row_width.push_back(width);
  }

  // The dense replica starts where every trainer's does.
  std::vector<int> dims;
  for (const TableConfig& t : job.tables) dims.insert(dims.end(), t.feature_names.size(), t.embedding_dim);
  DlrmModel init_model(job.model, dims, job.training.seed);
  r.dense.assign(init_model.params().begin(), init_model.params().end());
  std::vector<Layer> bottom, top;
  size_t off = 0;
  int width = job.model.num_dense_features;
  for (int64_t out : job.model.bottom_mlp) {
    bottom.push_back({width, static_cast<int>(out), off, off + width * out, true});
    off += width * out + out;
    width = static_cast<int>(out);
  }
  const int bottom_width = width;
  int iw = width;
  for (int d : dims) iw += d;
  width = iw;
  for (size_t i = 0; i < job.model.top_mlp.size(); ++i) {
    const int out = static_cast<int>(job.model.top_mlp[i]);
    top.push_back({width, out, off, off + static_cast<size_t>(width) * out, i + 1 < job.model.top_mlp.size()});
    off += static_cast<size_t>(width) * out + out;
    width = out;
  }
  if (off != r.dense.size()) return Status::Internal("reference MLP layout disagrees with DlrmModel's");

  const int64_t N = data->num_examples();
  const int64_t steps_per_epoch = (N + global_batch - 1) / global_batch;
  Batch batch;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t begin = (step % steps_per_epoch) * global_batch;
    const int64_t B = std::min(global_batch, N - begin);
    TESSERA_RETURN_IF_ERROR(data->Read(begin, B, &batch));
    const KeyedJaggedTensor& kjt = batch.sparse;

    // Pool every feature: pooled[f][b][c].
    std::vector<std::vector<double>> pooled;
    std::vector<int> feature_table;
    std::vector<std::vector<int64_t>> bag_begin;  // per feature, into values
    for (size_t t = 0; t < job.tables.size(); ++t) {
      for (const std::string& name : job.tables[t].feature_names) {
        const int key = kjt.KeyIndex(name);
        if (key < 0) return Status::InvalidArgument("reference: no feature " + name);
        int64_t v = kjt.FeatureValueOffsets()[key];
        const int dim = job.tables[t].embedding_dim;
        std::vector<double> p(B * dim, 0.0);
        std::vector<int64_t> starts;
        for (int64_t b = 0; b < B; ++b) {
          starts.push_back(v);
          const int32_t len = kjt.lengths[key * B + b];
          for (int32_t k = 0; k < len; ++k, ++v) {
            const double w = kjt.weighted() ? kjt.weights[v] : 1.0;
            const float* row = &r.tables[t][kjt.values[v] * r.row_width[t]];
            for (int c = 0; c < dim; ++c) p[b * dim + c] += w * row[c];
          }
          if (job.tables[t].pooling == PoolingType::kMean && len > 0) {
            for (int c = 0; c < dim; ++c) p[b * dim + c] /= len;
          }
        }
        pooled.push_back(std::move(p));
        feature_table.push_back(static_cast<int>(t));
        bag_begin.push_back(std::move(starts));
      }
    }

    // Dense forward, keeping every layer's input.
    auto forward = [&](const Layer& l, const std::vector<double>& x, std::vector<double>* y) {
      y->assign(B * l.out, 0.0);
      for (int64_t b = 0; b < B; ++b) {
        for (int o = 0; o < l.out; ++o) {
          double s = r.dense[l.b + o];
          for (int i = 0; i < l.in; ++i) s += r.dense[l.w + o * l.in + i] * x[b * l.in + i];
          (*y)[b * l.out + o] = l.relu ? std::max(s, 0.0) : s;
        }
      }
    };
    std::vector<std::vector<double>> bottom_in(bottom.size() + 1), top_in(top.size() + 1);
    bottom_in[0].assign(batch.dense.begin(), batch.dense.end());
    for (size_t i = 0; i < bottom.size(); ++i) forward(bottom[i], bottom_in[i], &bottom_in[i + 1]);
    top_in[0].assign(B * iw, 0.0);
    for (int64_t b = 0; b < B; ++b) {
      int c = 0;
      for (int k = 0; k < bottom_width; ++k) top_in[0][b * iw + c++] = bottom_in.back()[b * bottom_width + k];
      for (size_t f = 0; f < pooled.size(); ++f) {
        for (int k = 0; k < dims[f]; ++k) top_in[0][b * iw + c++] = pooled[f][b * dims[f] + k];
      }
    }
    for (size_t i = 0; i < top.size(); ++i) forward(top[i], top_in[i], &top_in[i + 1]);

    // Loss: mean BCE-with-logits over the global batch.
    std::vector<double> dy(B);
    double loss = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double z = top_in.back()[b], y = batch.labels[b];
      loss += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
      dy[b] = (1.0 / (1.0 + std::exp(-z)) - y) / B;
    }
    r.losses.push_back(loss / B);

    // Dense backward.
    std::vector<double> grad(r.dense.size(), 0.0);
    auto backward = [&](const Layer& l, const std::vector<double>& x, const std::vector<double>& y,
                        std::vector<double>* dy_io) {
      std::vector<double>& d = *dy_io;
      if (l.relu) {
        for (int64_t k = 0; k < B * l.out; ++k) {
          if (y[k] <= 0) d[k] = 0;
        }
      }
      std::vector<double> dx(B * l.in, 0.0);
      for (int64_t b = 0; b < B; ++b) {
        for (int o = 0; o < l.out; ++o) {
          const double g = d[b * l.out + o];
          grad[l.b + o] += g;
          for (int i = 0; i < l.in; ++i) {
            grad[l.w + o * l.in + i] += g * x[b * l.in + i];
            dx[b * l.in + i] += g * r.dense[l.w + o * l.in + i];
          }
        }
      }
      d.swap(dx);
    };
    std::vector<double> d = dy;
    for (size_t i = top.size(); i-- > 0;) backward(top[i], top_in[i], top_in[i + 1], &d);
    // d = d(interaction): the embeddings' part gives row gradients.
    std::vector<std::vector<std::vector<double>>> per_row(job.tables.size());
    std::vector<std::vector<char>> touched(job.tables.size());
    for (size_t t = 0; t < job.tables.size(); ++t) {
      per_row[t].assign(job.tables[t].num_embeddings, {});
      touched[t].assign(job.tables[t].num_embeddings, 0);
    }
    std::vector<double> d_bottom(B * bottom_width);
    for (int64_t b = 0; b < B; ++b) {
      int c = 0;
      for (int k = 0; k < bottom_width; ++k) d_bottom[b * bottom_width + k] = d[b * iw + c++];
      for (size_t f = 0; f < pooled.size(); ++f) {
        const int t = feature_table[f], dim = dims[f];
        const int key = kjt.KeyIndex(job.FeatureNames()[f]);
        const int32_t len = kjt.lengths[key * B + b];
        const double scale = (job.tables[t].pooling == PoolingType::kMean && len > 0) ? 1.0 / len : 1.0;
        for (int32_t k = 0; k < len; ++k) {
          const int64_t v = bag_begin[f][b] + k;
          const int64_t id = kjt.values[v];
          const double w = kjt.weighted() ? kjt.weights[v] : 1.0;
          if (!touched[t][id]) per_row[t][id].assign(dim, 0.0);
          touched[t][id] = 1;
          for (int j = 0; j < dim; ++j) per_row[t][id][j] += scale * w * d[b * iw + c + j];
        }
        c += dim;
      }
    }
    for (size_t i = bottom.size(); i-- > 0;) backward(bottom[i], bottom_in[i], bottom_in[i + 1], &d_bottom);

    // Optimizer steps: dense, then every touched row once.
    const OptimizerSpec& dopt = job.training.dense_optimizer;
    if (dopt.type != "sgd") return Status::Unimplemented("reference: dense optimizer " + dopt.type);
    for (size_t k = 0; k < r.dense.size(); ++k) {
      r.dense[k] = static_cast<float>(r.dense[k] - dopt.lr * (grad[k] + dopt.weight_decay * r.dense[k]));
    }
    for (size_t t = 0; t < job.tables.size(); ++t) {
      for (int64_t id = 0; id < job.tables[t].num_embeddings; ++id) {
        if (!touched[t][id]) continue;
        SparseStep(job.tables[t].optimizer, job.tables[t].embedding_dim, &r.tables[t][id * r.row_width[t]],
                   per_row[t][id]);
      }
    }
  }
  return r;
}

}  // namespace tessera
