// KeyedJaggedTensor: TorchRec's sparse input, the trainer's view of a batch's
// categorical features.
//
// For F features (keys) and B examples:
//   keys     [F]            feature names, in order
//   lengths  [F x B]        ids per (feature, example); feature-major: the
//                           lengths of feature f are lengths[f*B .. f*B+B)
//   values   [sum(lengths)] int64 ids, feature-major, then example order
//   weights  [sum(lengths)] per-id weights, or empty when unweighted
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

struct KeyedJaggedTensor {
  std::vector<std::string> keys;
  int64_t batch_size = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> values;
  std::vector<float> weights;

  int num_keys() const { return static_cast<int>(keys.size()); }
  bool weighted() const { return !weights.empty(); }

  // Checks the layout above: lengths.size() == F*B, lengths >= 0 and summing
  // to values.size(), weights empty or values.size().
  Status Validate() const;

  // Index of a feature name in `keys`, or -1.
  int KeyIndex(const std::string& key) const;

  // [F + 1] start of each feature's ids in `values`.
  std::vector<int64_t> FeatureValueOffsets() const;

  // The B+1 bag offsets of feature f, relative to that feature's first id.
  std::vector<int64_t> BagOffsets(int feature) const;

  // Lengths of feature f, [B].
  std::span<const int32_t> FeatureLengths(int feature) const {
    return std::span<const int32_t>(lengths).subspan(static_cast<size_t>(feature) * batch_size, batch_size);
  }

  void Clear();
};

}  // namespace tessera
