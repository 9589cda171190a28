// The overlap rule's arithmetic for one element (worker/leader/overlap_merge.hpp), shared by the
// host's OverlapMerge and its CUDA twin (kernels/overlap_cuda.cuh), so that both give the same
// bits: the callers are compiled without FMA contraction (-ffp-contract=off on the host,
// --fmad=false for the kernels), and every product and sum here is written in the one order both
// follow.
#pragma once

#include <cstddef>

#include "kernels/codec_math.hpp"  // GT_HD

namespace geotrain::kernels {

// The servers' outer optimizer as the worker models it (server.optimizer), and the mode's
// switches. inv_lr and inv_regions are computed once, on the host (1 / lr, 1 / R).
struct OverlapRule {
  bool carry = false;    // overlap: true (no outer step model)
  bool delayed = false;  // overlap: delayed (the other regions' last share)
  bool nesterov = false;
  float lr = 1.0f, inv_lr = 1.0f, mu = 0.0f, inv_regions = 1.0f;
};

// The rule's state over the whole table; null where the mode keeps none (momentum without the
// servers' momentum or with carry; last_push and others without delayed).
struct OverlapArrays {
  float* global = nullptr;       // theta_g as last merged
  float* after_start = nullptr;  // x right after the last start
  float* momentum = nullptr;     // the servers' momentum, as reconstructed
  float* last_push = nullptr;    // delayed: q of the last start
  float* others = nullptr;       // delayed: the other regions' share of the last merged round
};

// The average outer gradient d behind a change of the global values, `m` the momentum estimate
// (null: none), updated. With momentum m <- mu m + d, and
//   SGD:      change = lr d
//   momentum: change = lr m
//   Nesterov: change = lr (d + mu m) = lr ((1 + mu) d + mu^2 m_old).
GT_HD float outer_observe(const OverlapRule& r, float* m, float change) {
  if (m == nullptr) return change * r.inv_lr;
  if (r.nesterov) {
    const float d = (change * r.inv_lr - r.mu * r.mu * *m) * (1.0f / (1.0f + r.mu));
    *m = r.mu * *m + d;
    return d;
  }
  const float m_new = change * r.inv_lr;
  const float d = m_new - r.mu * *m;
  *m = m_new;
  return d;
}

// The step the servers would take for an average outer gradient d, from the momentum estimate
// `m` (null: none), which does not change.
GT_HD float outer_predict(const OverlapRule& r, const float* m, float d) {
  if (m == nullptr) return r.lr * d;
  const float m_new = r.mu * *m + d;
  return r.nesterov ? r.lr * (d + r.mu * m_new) : r.lr * m_new;
}

// START at element j: `push` takes the local value x, and x becomes theta_g + proxy(q).
GT_HD void overlap_start_at(const OverlapRule& r, const OverlapArrays& a, size_t j, float& x,
                            float& push) {
  push = x;
  if (r.carry) {  // the push is the local value itself, and x stays
    a.after_start[j] = x;
    return;
  }
  const float g = a.global[j];
  // d = q / R (+ the others' last share): the predicted average outer gradient.
  float d = (x - g) * r.inv_regions;
  if (r.delayed) {
    a.last_push[j] = x - g;
    d += a.others[j];
  }
  x = g + outer_predict(r, a.momentum == nullptr ? nullptr : a.momentum + j, d);
  a.after_start[j] = x;
}

// MERGE at element j with the new global value: x = global + (x - value after start).
GT_HD void overlap_merge_at(const OverlapRule& r, const OverlapArrays& a, size_t j, float& x,
                            float global) {
  if (!r.carry) {
    // What the servers did: recover the average outer gradient (and their momentum).
    const float d =
        outer_observe(r, a.momentum == nullptr ? nullptr : a.momentum + j, global - a.global[j]);
    if (r.delayed) a.others[j] = d - a.last_push[j] * r.inv_regions;
  }
  x = global + (x - a.after_start[j]);
  a.global[j] = global;
}

}  // namespace geotrain::kernels
