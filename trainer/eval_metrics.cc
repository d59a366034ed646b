#include "trainer/eval_metrics.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/dense_ops.h"

namespace tessera {

double RocAuc(std::span<const float> scores, std::span<const float> labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U: sum of the positives' ranks, ties given their mean rank.
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

double MeanLogLoss(std::span<const float> logits, std::span<const float> labels) {
  if (logits.empty()) return 0.0;
  return kernels::SigmoidBceLossSum(logits.data(), labels.data(), static_cast<int64_t>(logits.size())) /
         static_cast<double>(logits.size());
}

}  // namespace tessera
