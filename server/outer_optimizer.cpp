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
// vectorises each (-O3): an unselected element is copied unchanged (a blend), not skipped.
// `Masked` = false: every element is selected.
template <bool Masked, bool Momentum>
void step_loop(const OuterOptimizerConfig& c, const float* GT_RESTRICT theta,
               const float* GT_RESTRICT m, const float* GT_RESTRICT delta,
               const uint8_t* GT_RESTRICT mask, uint8_t select, DeltaScale scale,
               float* GT_RESTRICT theta_out, float* GT_RESTRICT m_out, size_t n) {
  const float lr = c.lr, mu = c.momentum, w = scale.weight, div = scale.divisor;
  const bool nesterov = c.nesterov;
  for (size_t i = 0; i < n; ++i) {
    const float d = w * delta[i] / div;
    const bool on = !Masked || mask[i] == select;
    if constexpr (Momentum) {
      const float g = -d;
      const float m_new = mu * m[i] + g;
      const float t_new = theta[i] - (nesterov ? lr * (g + mu * m_new) : lr * m_new);
      m_out[i] = on ? m_new : m[i];
      theta_out[i] = on ? t_new : theta[i];
    } else {
      const float t_new = theta[i] - lr * -d;
      theta_out[i] = on ? t_new : theta[i];
    }
  }
}

bool overlap(ConstFloatSpan a, ConstFloatSpan b) {
  return !a.empty() && !b.empty() && a.data() < b.data() + b.size() &&
         b.data() < a.data() + a.size();
}

}  // namespace

void outer_step(const OuterOptimizerConfig& c, ConstFloatSpan theta, ConstFloatSpan m,
                ConstFloatSpan delta, std::span<const uint8_t> mask, uint8_t select,
                DeltaScale scale, FloatSpan theta_out, FloatSpan m_out) {
  const size_t n = theta.size();
  const bool momentum = c.momentum != 0.0f;
  GT_ASSERT(delta.size() == n && theta_out.size() == n && (mask.empty() || mask.size() == n) &&
                (!momentum || (m.size() == n && m_out.size() == n)),
            "outer_step sizes: theta {} m {} delta {} mask {} theta_out {} m_out {}", n, m.size(),
            delta.size(), mask.size(), theta_out.size(), m_out.size());
  GT_ASSERT(!overlap(theta_out, theta) && !overlap(theta_out, delta) &&
                (!momentum ||
                 (!overlap(m_out, m) && !overlap(m_out, delta) && !overlap(m_out, theta_out))),
            "outer_step writes out of place: its outputs must not overlap its inputs");
  const uint8_t* sel = mask.empty() ? nullptr : mask.data();
  float* mo = momentum ? m_out.data() : nullptr;
  const float* mi = momentum ? m.data() : nullptr;
  if (sel == nullptr) {
    if (momentum)
      step_loop<false, true>(c, theta.data(), mi, delta.data(), sel, select, scale,
                             theta_out.data(), mo, n);
    else
      step_loop<false, false>(c, theta.data(), mi, delta.data(), sel, select, scale,
                              theta_out.data(), mo, n);
  } else {
    if (momentum)
      step_loop<true, true>(c, theta.data(), mi, delta.data(), sel, select, scale, theta_out.data(),
                            mo, n);
    else
      step_loop<true, false>(c, theta.data(), mi, delta.data(), sel, select, scale,
                             theta_out.data(), mo, n);
  }
}

}  // namespace geotrain::server
