// OverlapMerge: what a region's parameters become while its outer gradient is on the WAN, and
// when the global result comes back (docs/training.md, "Overlap modes").
//
// Notation, per fragment (the whole table without streaming): theta_g is the global value the
// servers last returned, q the region's progress since its last push (its outer gradient, with
// the sign of a step), R the number of regions. At the START of an exchange the region pushes q
// and its parameters become theta_g + proxy(q), a guess at the global step still in flight; at
// the MERGE, when the new theta_g' arrives, the guess is replaced by the truth:
//   x <- theta_g' + r,   r = the progress made since the START.
// The modes differ only in the guess:
//   carry   (overlap: true)  proxy(q) = q: the region's own progress at full weight, as if every
//                            region had made the same progress (the behaviour before modes).
//   eager   (overlap: eager) proxy(q) = step(q / R): the region's own share of the average,
//                            through the servers' outer optimizer, with the others' in-flight
//                            shares unknown (zero): eager updates, arXiv 2502.12996.
//   delayed (overlap: delayed) proxy(q) = step(q / R + o): as eager, plus o = the other regions'
//                            share of the last merged round, a first-order prediction of the
//                            in-flight step (delay compensation).
// step() is the servers' outer optimizer (server.optimizer: lr, momentum, Nesterov). Its
// momentum is not sent; OuterStepModel reconstructs it from the successive global values, so the
// proxy includes the momentum the servers will apply anyway.
//
// Pure arithmetic over caller-owned spans: no threads, no network. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/outer_step.hpp"
#include "core/span.hpp"
#include "kernels/overlap_math.hpp"

namespace geotrain::worker {

enum class OverlapMode { off, carry, eager, delayed };

// "false"/"true"/"eager"/"delayed" (worker.overlap); InputError otherwise.
OverlapMode parse_overlap_mode(std::string_view text);
std::string_view overlap_mode_name(OverlapMode mode);  // false | true | eager | delayed

// The servers' outer optimizer, as the worker models it (server.optimizer).
using OuterStepConfig = OuterStep;  // core/outer_step.hpp

// Tracks the servers' momentum from the global values they return, and predicts their step.
// With SGD (momentum 0) it is stateless.
class OuterStepModel {
 public:
  OuterStepModel(OuterStepConfig config, size_t elements);

  // The servers moved the global values by `change` (theta_g' - theta_g) on [offset, offset +
  // change.size()). Recovers the average outer gradient d of that step and updates the
  // momentum estimate: with momentum m <- mu m + d, and
  //   SGD:      change = lr d
  //   momentum: change = lr m
  //   Nesterov: change = lr (d + mu m) = lr ((1 + mu) d + mu^2 m_old).
  // Writes d into `gradient` (same size as change).
  void observe(uint64_t offset, ConstFloatSpan change, FloatSpan gradient);

  // The step the servers would take for an average outer gradient `d` on [offset, ...), from
  // the current momentum estimate, into `out`. Does not change the estimate.
  void predict(uint64_t offset, ConstFloatSpan d, FloatSpan out) const;

  // The same for element j of the table alone (kernels/overlap_math.hpp, which OverlapMerge's
  // passes and their CUDA twins share).
  float observe_at(uint64_t j, float change) {
    return kernels::outer_observe(rule_, momentum_.empty() ? nullptr : &momentum_[j], change);
  }
  float predict_at(uint64_t j, float d) const {
    return kernels::outer_predict(rule_, momentum_.empty() ? nullptr : &momentum_[j], d);
  }

  const OuterStepConfig& config() const { return config_; }
  // The momentum estimate (empty without momentum), for moving it to or from a device.
  std::vector<float>& momentum() { return momentum_; }

 private:
  OuterStepConfig config_;
  kernels::OverlapRule rule_;    // config_ as the shared arithmetic takes it
  std::vector<float> momentum_;  // empty without momentum
};

// The rule's arrays (OverlapMerge's, below), whole-table, as they move between the host and a
// device (worker/leader/leader_params.hpp); empty where the mode keeps none.
struct OverlapState {
  std::vector<float> global, after_start, momentum, last_push, others;
};

// The merge rule for one region, over the whole flat table; every call names the range of one
// fragment and touches nothing outside it.
class OverlapMerge {
 public:
  // `global`: the global values the region starts from (after connect()); `regions`: R.
  OverlapMerge(OverlapMode mode, OuterStepConfig outer, uint32_t regions, ConstFloatSpan global);
  // The rule with the arrays `state` holds (taken from a device: the sizes of a rule made from
  // the global values; InputError otherwise).
  OverlapMerge(OverlapMode mode, OuterStepConfig outer, uint32_t regions, OverlapState state);

  // The scalar switches and constants of the rule for `mode` (as the CUDA twin takes them), and
  // which of OverlapState's arrays it keeps beside global and after_start.
  static kernels::OverlapRule rule_for(OverlapMode mode, OuterStepConfig outer, uint32_t regions);
  static bool keeps_momentum(OverlapMode mode, OuterStepConfig outer) {
    return mode != OverlapMode::carry && outer.momentum > 0;
  }
  static bool keeps_others(OverlapMode mode) { return mode == OverlapMode::delayed; }

  // START of an exchange on [offset, offset + n): x holds the local parameters. Writes the
  // values to push (theta_g + q) into `push` on the range and sets x to theta_g + proxy(q).
  void start(uint64_t offset, uint64_t n, FloatSpan x, FloatSpan push);

  // MERGE: the exchange started last on the range returned the global values `global` (the
  // full table; only the range is read). Sets x to global + (x - value after start).
  void merge(uint64_t offset, uint64_t n, FloatSpan x, ConstFloatSpan global);

  // A blocking exchange set the range to `global` (full table): the next start measures from it.
  void take_global(uint64_t offset, uint64_t n, ConstFloatSpan global);

  OverlapMode mode() const { return mode_; }

 private:
  kernels::OverlapArrays arrays();

  OverlapMode mode_;
  OuterStepModel outer_;
  kernels::OverlapRule rule_;
  std::vector<float> global_;       // theta_g as last merged
  std::vector<float> after_start_;  // x right after the last start (progress since = x - this)
  std::vector<float> last_push_;    // delayed: q of the last merged round
  std::vector<float> others_;       // delayed: the other regions' share of the last merged round
};

}  // namespace geotrain::worker
