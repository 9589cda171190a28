#include "kernels/ops/cross_entropy.hpp"

#include <cmath>
#include <vector>

#include "kernels/ops/threads.hpp"
#include "kernels/ops/vec_math.hpp"

namespace geotrain::kernels::cpu {

CrossEntropyResult cross_entropy(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, size_t N, size_t V, float dloss) {
  // Each row is one task; its loss and hit land in losses[r] and hit[r], summed in order below.
  std::vector<uint8_t> hit(N);
  constexpr size_t kRowBlock = 8;  // rows per task
  parallel_for((N + kRowBlock - 1) / kRowBlock, [&](size_t blk) {
    for (size_t r = blk * kRowBlock; r < N && r < (blk + 1) * kRowBlock; ++r) {
      const float* z = logits + r * V;  // (V)
      size_t arg = 0;
      for (size_t v = 1; v < V; ++v)
        if (z[v] > z[arg]) arg = v;
      const float mx = z[arg];
      double sum = 0.0;
      for (size_t v = 0; v < V; ++v) sum += vexp(z[v] - mx);
      const auto target = static_cast<size_t>(targets[r]);
      const double log_sum = std::log(sum);
      losses[r] = static_cast<float>(log_sum + mx - z[target]);
      hit[r] = arg == target ? 1 : 0;
      if (dlogits != nullptr) {
        float* d = dlogits + r * V;  // may be z itself: z[target] and mx were read above
        const auto shift = static_cast<float>(log_sum) + mx;
        for (size_t v = 0; v < V; ++v) d[v] = vexp(z[v] - shift) * dloss;
        d[target] -= dloss;
      }
    }
  });
  CrossEntropyResult result;
  for (size_t r = 0; r < N; ++r) {
    result.loss_sum += losses[r];
    result.correct += hit[r];
  }
  return result;
}

}  // namespace geotrain::kernels::cpu
