// Softmax cross-entropy over a vocabulary, with its backward fused in.
//
//   losses[r] = log(sum_v exp(logits[r, v])) - logits[r, targets[r]]   (around the row maximum)
//   dlogits[r, v] = (softmax(logits[r])[v] - [v == targets[r]]) * dloss
// dloss is d(loss)/d(losses[r]), the same for every row: 1 / N for a mean over N rows.
// Shapes: logits, dlogits (N, V); targets, losses (N), every target in [0, V) (the caller checks).
// dlogits may be null (forward only) or alias logits (in place). Returns the sum of losses in
// double, summed in row order, and the rows whose argmax (first maximum) is the target. Rows are
// split over up to threads() threads; bit-identical for any count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cpu {

struct CrossEntropyResult {
  double loss_sum = 0;
  size_t correct = 0;
};

CrossEntropyResult cross_entropy(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, size_t N, size_t V, float dloss);

}  // namespace geotrain::kernels::cpu
