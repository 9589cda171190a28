// OuterOptimizer: the update a server applies to its shard from the regions' averaged deltas,
// as in DiLoCo (Douillard et al. 2023). The pseudo-gradient is g = -delta (delta = theta_local -
// theta_base), so SGD with lr 1 and no momentum is plain averaging: theta += mean(delta).
//
//   momentum:  m = mu*m + g;  theta -= lr*m
//   nesterov:  m = mu*m + g;  theta -= lr*(g + mu*m)
//
// Owns only its settings; the momentum buffer belongs to the shard (it is checkpointed with
// it), and so does the per-round accumulator of push_step/release_step (below). Every step here
// changes only elements whose mask byte equals `select` (an empty mask selects every element).
// Pure, nothing blocks.
//
// Momentum under asynchrony. Non-critical elements are stepped on every push, yet their momentum
// must move once per round, as a synchronous round's does. With g = sum_i g_i, the scaled
// pseudo-gradients of a round's pushes, and m the momentum of the round before, the round's step
//   momentum:  theta -= lr*(g + mu*m)               m = mu*m + g
//   nesterov:  theta -= lr*((1 + mu)*g + mu*mu*m)   m = mu*m + g
// is linear in g, so it splits exactly into a share per push and a share per round:
//   push_step     each push:             theta -= lr*c*g_i  (c = 1, or 1 + mu);  a += g_i
//   release_step  the round's release:   theta -= lr*k*m    (k = mu, or mu*mu);  m = mu*m + a
// where a is the round's accumulator (zero before its first push). Once a round's pushes are in
// and it is released, theta and m are what one outer_step on g makes (to rounding; R pushes of
// delta_i / R make g the mean delta's), in whatever order the pushes came; in between, theta
// holds every push's share and m is still the momentum of the round before. (Stepping m on every
// push instead, as outer_step would, decays it by mu^R per round of R pushes and adds the Nesterov
// look-ahead R times.)
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/outer_step.hpp"
#include "core/span.hpp"

namespace geotrain::server {

struct OuterOptimizerConfig : OuterStep {
  std::string describe() const;
};

// The delta the optimizer sees is weight * delta[i] / divisor, computed per element in that
// order (a stale push's weight, the number of regions it is averaged over). Folding the scaling
// into the step saves the shard a pass; {1, 1} leaves delta exactly as it is.
struct DeltaScale {
  float weight = 1.0f;
  float divisor = 1.0f;
};

// theta and m: the shard; delta: the (weighted) average delta over the same range, or the raw
// delta with `scale` saying how to weigh and average it. Writes the stepped theta and m to
// theta_out and m_out, which must not overlap the inputs (the shard computes its next version
// beside the published one, server/value_buffer.hpp); unselected elements are copied. Without
// momentum m is neither read nor written (it stays zero), and m_out may be empty. One pass.
void outer_step(const OuterOptimizerConfig& config, ConstFloatSpan theta, ConstFloatSpan m,
                ConstFloatSpan delta, std::span<const uint8_t> mask, uint8_t select,
                DeltaScale scale, FloatSpan theta_out, FloatSpan m_out);

// One push's share of its round (optimizer with momentum only): theta_out = theta - lr*c*g and
// a_out = a + g, g = -(weight * delta / divisor), on selected elements; unselected ones are
// copied (a's as zero). `a` is the round's accumulator so far; empty: zero (the round's first
// push). Outputs must not overlap inputs: a dropped push leaves theta and a as they were. One pass.
void push_step(const OuterOptimizerConfig& config, ConstFloatSpan theta, ConstFloatSpan a,
               ConstFloatSpan delta, std::span<const uint8_t> mask, uint8_t select,
               DeltaScale scale, FloatSpan theta_out, FloatSpan a_out);

// The round's share, in place (optimizer with momentum only): on selected elements
// theta -= lr*k*m, then m = mu*m + a, with `a` the accumulator of the round's push_steps;
// unselected elements are left as they are. One pass.
void release_step(const OuterOptimizerConfig& config, ConstFloatSpan a,
                  std::span<const uint8_t> mask, uint8_t select, FloatSpan theta, FloatSpan m);

}  // namespace geotrain::server
