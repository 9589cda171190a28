#include "server/outer_optimizer.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

#define GT_RESTRICT __restrict__

namespace geotrain::server {

std::string OuterOptimizerConfig::describe() const {
  return fmt::format("{}(lr={}, momentum={})", nesterov ? "nesterov" : "sgd", lr, momentum);
}

namespace {

// One loop per case, over restrict pointers and without branches in the body, so that GCC
// vectorises each (-O3): a masked-out element is written back unchanged (a blend), not skipped.
// `Masked` = false: every element is selected.
template <bool Masked, bool Momentum>
void step_loop(const OuterOptimizerConfig& c, float* GT_RESTRICT theta, float* GT_RESTRICT m,
               const float* GT_RESTRICT delta, const uint8_t* GT_RESTRICT mask, uint8_t select,
               DeltaScale scale, size_t n) {
  const float lr = c.lr, mu = c.momentum, w = scale.weight, div = scale.divisor;
  const bool nesterov = c.nesterov;
  for (size_t i = 0; i < n; ++i) {
    const float d = w * delta[i] / div;
    const bool on = !Masked || mask[i] == select;
    if constexpr (Momentum) {
      const float g = -d;
      const float m_new = mu * m[i] + g;
      const float t_new = theta[i] - (nesterov ? lr * (g + mu * m_new) : lr * m_new);
      m[i] = on ? m_new : m[i];
      theta[i] = on ? t_new : theta[i];
    } else {
      const float t_new = theta[i] - lr * -d;
      theta[i] = on ? t_new : theta[i];
    }
  }
}

}  // namespace

void outer_step(const OuterOptimizerConfig& c, FloatSpan theta, FloatSpan m, ConstFloatSpan delta,
                std::span<const uint8_t> mask, uint8_t select, DeltaScale scale) {
  GT_ASSERT(theta.size() == delta.size() && m.size() == theta.size() &&
                (mask.empty() || mask.size() == theta.size()),
            "outer_step sizes: theta {} m {} delta {} mask {}", theta.size(), m.size(),
            delta.size(), mask.size());
  const size_t n = theta.size();
  const bool momentum = c.momentum != 0.0f;
  if (mask.empty()) {
    if (momentum)
      step_loop<false, true>(c, theta.data(), m.data(), delta.data(), nullptr, select, scale, n);
    else
      step_loop<false, false>(c, theta.data(), m.data(), delta.data(), nullptr, select, scale, n);
  } else {
    if (momentum)
      step_loop<true, true>(c, theta.data(), m.data(), delta.data(), mask.data(), select, scale, n);
    else
      step_loop<true, false>(c, theta.data(), m.data(), delta.data(), mask.data(), select, scale,
                             n);
  }
}

}  // namespace geotrain::server
