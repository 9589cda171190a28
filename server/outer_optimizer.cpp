#include "server/outer_optimizer.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace geotrain::server {

std::string OuterOptimizerConfig::describe() const {
  return fmt::format("{}(lr={}, momentum={})", nesterov ? "nesterov" : "sgd", lr, momentum);
}

void outer_step(const OuterOptimizerConfig& c, FloatSpan theta, FloatSpan m, ConstFloatSpan delta,
                std::span<const uint8_t> mask, uint8_t select) {
  GT_ASSERT(theta.size() == delta.size() && m.size() == theta.size() && mask.size() == theta.size(),
            "outer_step sizes: theta {} m {} delta {} mask {}", theta.size(), m.size(), delta.size(),
            mask.size());
  const float lr = c.lr, mu = c.momentum;
  if (mu == 0.0f) {
    for (size_t i = 0; i < theta.size(); ++i)
      if (mask[i] == select) theta[i] -= lr * -delta[i];
    return;
  }
  for (size_t i = 0; i < theta.size(); ++i) {
    if (mask[i] != select) continue;
    const float g = -delta[i];
    m[i] = mu * m[i] + g;
    theta[i] -= c.nesterov ? lr * (g + mu * m[i]) : lr * m[i];
  }
}

}  // namespace geotrain::server
