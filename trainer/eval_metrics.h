// Metrics of a click model on held-out data.
#pragma once

#include <span>

namespace tessera {

// Area under the ROC curve of scores against 0/1 labels (ties count half).
// 0.5 when one class is absent.
double RocAuc(std::span<const float> scores, std::span<const float> labels);

// Mean binary cross-entropy of logits against 0/1 labels.
double MeanLogLoss(std::span<const float> logits, std::span<const float> labels);

}  // namespace tessera
