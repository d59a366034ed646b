#include "common/keyed_jagged_tensor.h"

#include <string>

namespace tessera {

Status KeyedJaggedTensor::Validate() const {
  if (batch_size < 0) return Status::InvalidArgument("negative batch size");
  const size_t expect = keys.size() * static_cast<size_t>(batch_size);
  if (lengths.size() != expect) {
    return Status::InvalidArgument("KeyedJaggedTensor has " + std::to_string(lengths.size()) +
                                   " lengths, expected keys x batch = " + std::to_string(expect));
  }
  int64_t total = 0;
  for (int32_t len : lengths) {
    if (len < 0) return Status::InvalidArgument("KeyedJaggedTensor has a negative length");
    total += len;
  }
  if (total != static_cast<int64_t>(values.size())) {
    return Status::InvalidArgument("KeyedJaggedTensor lengths sum to " + std::to_string(total) + " but it holds " +
                                   std::to_string(values.size()) + " values");
  }
  if (!weights.empty() && weights.size() != values.size()) {
    return Status::InvalidArgument("KeyedJaggedTensor has " + std::to_string(weights.size()) + " weights for " +
                                   std::to_string(values.size()) + " values");
  }
  return Status::OK();
}

int KeyedJaggedTensor::KeyIndex(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int64_t> KeyedJaggedTensor::FeatureValueOffsets() const {
  std::vector<int64_t> out(keys.size() + 1, 0);
  for (size_t f = 0; f < keys.size(); ++f) {
    int64_t sum = 0;
    for (int32_t len : FeatureLengths(static_cast<int>(f))) sum += len;
    out[f + 1] = out[f] + sum;
  }
  return out;
}

std::vector<int64_t> KeyedJaggedTensor::BagOffsets(int feature) const {
  std::vector<int64_t> out(static_cast<size_t>(batch_size) + 1, 0);
  auto lens = FeatureLengths(feature);
  for (int64_t b = 0; b < batch_size; ++b) out[b + 1] = out[b] + lens[b];
  return out;
}

void KeyedJaggedTensor::Clear() {
  keys.clear();
  batch_size = 0;
  lengths.clear();
  values.clear();
  weights.clear();
}

}  // namespace tessera
