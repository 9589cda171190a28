#include "server/outer_optimizer.hpp"

#include <fmt/format.h>

#include <type_traits>

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

// The coefficients of the split step (header): push_step's c and release_step's k.
struct Split {
  float push = 1.0f, release = 0.0f;
};
Split split_of(const OuterOptimizerConfig& c) {
  const float mu = c.momentum;
  return c.nesterov ? Split{1.0f + mu, mu * mu} : Split{1.0f, mu};
}

// `FirstPush`: the round has no accumulator yet, `a` reads as zero.
template <bool Masked, bool FirstPush>
void push_loop(const OuterOptimizerConfig& c, const float* GT_RESTRICT theta,
               const float* GT_RESTRICT a, const float* GT_RESTRICT delta,
               const uint8_t* GT_RESTRICT mask, uint8_t select, DeltaScale scale,
               float* GT_RESTRICT theta_out, float* GT_RESTRICT a_out, size_t n) {
  const float lr_c = c.lr * split_of(c).push, w = scale.weight, div = scale.divisor;
  for (size_t i = 0; i < n; ++i) {
    const float g = -(w * delta[i] / div);
    const bool on = !Masked || mask[i] == select;
    const float a_old = FirstPush ? 0.0f : a[i];
    a_out[i] = on ? a_old + g : a_old;
    theta_out[i] = on ? theta[i] - lr_c * g : theta[i];
  }
}

template <bool Masked>
void release_loop(const OuterOptimizerConfig& c, const float* GT_RESTRICT a,
                  const uint8_t* GT_RESTRICT mask, uint8_t select, float* GT_RESTRICT theta,
                  float* GT_RESTRICT m, size_t n) {
  const float lr_k = c.lr * split_of(c).release, mu = c.momentum;
  for (size_t i = 0; i < n; ++i) {
    const bool on = !Masked || mask[i] == select;
    const float m_old = m[i];
    theta[i] = on ? theta[i] - lr_k * m_old : theta[i];
    m[i] = on ? mu * m_old + a[i] : m_old;
  }
}

// Calls loop(masked, b) with both as std::bool_constant: one instantiation per case.
template <typename Loop>
void dispatch(bool masked, bool b, Loop&& loop) {
  if (masked) {
    if (b)
      loop(std::true_type{}, std::true_type{});
    else
      loop(std::true_type{}, std::false_type{});
  } else {
    if (b)
      loop(std::false_type{}, std::true_type{});
    else
      loop(std::false_type{}, std::false_type{});
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
  const float* mi = momentum ? m.data() : nullptr;
  float* mo = momentum ? m_out.data() : nullptr;
  dispatch(!mask.empty(), momentum, [&](auto masked, auto with_momentum) {
    step_loop<decltype(masked)::value, decltype(with_momentum)::value>(
        c, theta.data(), mi, delta.data(), mask.data(), select, scale, theta_out.data(), mo, n);
  });
}

void push_step(const OuterOptimizerConfig& c, ConstFloatSpan theta, ConstFloatSpan a,
               ConstFloatSpan delta, std::span<const uint8_t> mask, uint8_t select,
               DeltaScale scale, FloatSpan theta_out, FloatSpan a_out) {
  const size_t n = theta.size();
  GT_ASSERT(c.momentum != 0.0f, "push_step without momentum: outer_step is the whole step");
  GT_ASSERT((a.empty() || a.size() == n) && delta.size() == n && theta_out.size() == n &&
                a_out.size() == n && (mask.empty() || mask.size() == n),
            "push_step sizes: theta {} a {} delta {} mask {} theta_out {} a_out {}", n, a.size(),
            delta.size(), mask.size(), theta_out.size(), a_out.size());
  GT_ASSERT(!overlap(theta_out, theta) && !overlap(theta_out, delta) && !overlap(a_out, a) &&
                !overlap(a_out, delta) && !overlap(a_out, theta_out),
            "push_step writes out of place: its outputs must not overlap its inputs");
  dispatch(!mask.empty(), a.empty(), [&](auto masked, auto first_push) {
    push_loop<decltype(masked)::value, decltype(first_push)::value>(
        c, theta.data(), a.data(), delta.data(), mask.data(), select, scale, theta_out.data(),
        a_out.data(), n);
  });
}

void release_step(const OuterOptimizerConfig& c, ConstFloatSpan a, std::span<const uint8_t> mask,
                  uint8_t select, FloatSpan theta, FloatSpan m) {
  const size_t n = theta.size();
  GT_ASSERT(c.momentum != 0.0f, "release_step without momentum: there is no round share");
  GT_ASSERT(a.size() == n && m.size() == n && (mask.empty() || mask.size() == n),
            "release_step sizes: theta {} m {} a {} mask {}", n, m.size(), a.size(), mask.size());
  GT_ASSERT(!overlap(theta, m) && !overlap(theta, a) && !overlap(m, a),
            "release_step: theta, m and a must be distinct buffers");
  if (mask.empty())
    release_loop<false>(c, a.data(), nullptr, select, theta.data(), m.data(), n);
  else
    release_loop<true>(c, a.data(), mask.data(), select, theta.data(), m.data(), n);
}

}  // namespace geotrain::server
