// OuterOptimizer: the update a server applies to its shard from the regions' averaged deltas,
// as in DiLoCo (Douillard et al. 2023). The pseudo-gradient is g = -delta (delta = theta_local -
// theta_base), so SGD with lr 1 and no momentum is plain averaging: theta += mean(delta).
//
//   momentum:  m = mu*m + g;  theta -= lr*m
//   nesterov:  m = mu*m + g;  theta -= lr*(g + mu*m)
//
// Owns only its settings; the momentum buffer belongs to the shard (it is checkpointed with
// it). outer_step() changes only elements whose mask byte equals `select` (an empty mask selects
// every element). Pure, nothing blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/span.hpp"

namespace geotrain::server {

struct OuterOptimizerConfig {
  float lr = 1.0f;
  float momentum = 0.0f;  // in [0, 1)
  bool nesterov = false;
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

}  // namespace geotrain::server
