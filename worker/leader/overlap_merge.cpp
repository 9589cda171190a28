#include "worker/leader/overlap_merge.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"

namespace geotrain::worker {

OverlapMode parse_overlap_mode(std::string_view text) {
  if (text == "false") return OverlapMode::off;
  if (text == "true") return OverlapMode::carry;
  if (text == "eager") return OverlapMode::eager;
  if (text == "delayed") return OverlapMode::delayed;
  GT_REQUIRE(false, "worker.overlap is '{}', allowed: false, true, eager, delayed", text);
  return OverlapMode::off;
}

std::string_view overlap_mode_name(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::off:
      return "false";
    case OverlapMode::carry:
      return "true";
    case OverlapMode::eager:
      return "eager";
    case OverlapMode::delayed:
      return "delayed";
  }
  return "?";
}

OuterStepModel::OuterStepModel(OuterStepConfig config, size_t elements) : config_(config) {
  GT_REQUIRE(config_.lr > 0, "outer step: lr is {}, must be positive", config_.lr);
  GT_REQUIRE(config_.momentum >= 0 && config_.momentum < 1,
             "outer step: momentum is {}, must be in [0, 1)", config_.momentum);
  rule_.nesterov = config_.nesterov;
  rule_.lr = config_.lr;
  rule_.inv_lr = 1.0f / config_.lr;
  rule_.mu = config_.momentum;
  if (config_.momentum > 0) momentum_.assign(elements, 0.0f);
}

void OuterStepModel::observe(uint64_t offset, ConstFloatSpan change, FloatSpan gradient) {
  GT_ASSERT(gradient.size() == change.size(), "observe: {} vs {}", gradient.size(), change.size());
  GT_ASSERT(momentum_.empty() || offset + change.size() <= momentum_.size(),
            "observe: range past the table");
  for (size_t i = 0; i < change.size(); ++i) gradient[i] = observe_at(offset + i, change[i]);
}

void OuterStepModel::predict(uint64_t offset, ConstFloatSpan d, FloatSpan out) const {
  GT_ASSERT(out.size() == d.size(), "predict: {} vs {}", out.size(), d.size());
  GT_ASSERT(momentum_.empty() || offset + d.size() <= momentum_.size(),
            "predict: range past the table");
  for (size_t i = 0; i < d.size(); ++i) out[i] = predict_at(offset + i, d[i]);
}

kernels::OverlapRule OverlapMerge::rule_for(OverlapMode mode, OuterStepConfig outer,
                                            uint32_t regions) {
  GT_REQUIRE(regions >= 1, "overlap: regions is 0");
  GT_ASSERT(mode != OverlapMode::off, "OverlapMerge without overlap");
  kernels::OverlapRule rule;
  rule.carry = mode == OverlapMode::carry;
  rule.delayed = mode == OverlapMode::delayed;
  rule.nesterov = outer.nesterov;
  rule.lr = outer.lr;
  rule.inv_lr = 1.0f / outer.lr;
  rule.mu = outer.momentum;
  rule.inv_regions = 1.0f / static_cast<float>(regions);
  return rule;
}

OverlapMerge::OverlapMerge(OverlapMode mode, OuterStepConfig outer, uint32_t regions,
                           ConstFloatSpan global)
    : mode_(mode),
      outer_(outer, mode == OverlapMode::carry ? 0 : global.size()),
      rule_(rule_for(mode, outer, regions)),
      global_(global.begin(), global.end()),
      after_start_(global.begin(), global.end()) {
  if (keeps_others(mode)) {
    last_push_.assign(global.size(), 0.0f);
    others_.assign(global.size(), 0.0f);
  }
}

OverlapMerge::OverlapMerge(OverlapMode mode, OuterStepConfig outer, uint32_t regions,
                           OverlapState state)
    : mode_(mode),
      outer_(outer, 0),
      rule_(rule_for(mode, outer, regions)),
      global_(std::move(state.global)),
      after_start_(std::move(state.after_start)),
      last_push_(std::move(state.last_push)),
      others_(std::move(state.others)) {
  const size_t n = global_.size();
  const auto want = [&](bool kept) { return kept ? n : size_t{0}; };
  GT_REQUIRE(after_start_.size() == n &&
                 state.momentum.size() == want(keeps_momentum(mode, outer)) &&
                 last_push_.size() == want(keeps_others(mode)) &&
                 others_.size() == want(keeps_others(mode)),
             "overlap: the rule's state does not fit a table of {} parameters in mode {}", n,
             overlap_mode_name(mode));
  outer_.momentum() = std::move(state.momentum);
}

kernels::OverlapArrays OverlapMerge::arrays() {
  auto data = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  return {data(global_), data(after_start_), data(outer_.momentum()), data(last_push_),
          data(others_)};
}

// start() and merge() make one pass over their range each (the parameters of a large model are
// hundreds of megabytes: every pass is time the region's steps wait for).
void OverlapMerge::start(uint64_t offset, uint64_t n, FloatSpan x, FloatSpan push) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && push.size() == global_.size(),
      "overlap start: range [{}, {}) of {}", offset, offset + n, global_.size());
  const auto a = arrays();
  for (uint64_t j = offset; j < offset + n; ++j)
    kernels::overlap_start_at(rule_, a, j, x[j], push[j]);
}

void OverlapMerge::merge(uint64_t offset, uint64_t n, FloatSpan x, ConstFloatSpan global) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && global.size() == global_.size(),
      "overlap merge: range [{}, {}) of {}", offset, offset + n, global_.size());
  const auto a = arrays();
  for (uint64_t j = offset; j < offset + n; ++j)
    kernels::overlap_merge_at(rule_, a, j, x[j], global[j]);
}

void OverlapMerge::take_global(uint64_t offset, uint64_t n, ConstFloatSpan global) {
  GT_ASSERT(offset + n <= global_.size() && global.size() == global_.size(),
            "overlap: range [{}, {}) of {}", offset, offset + n, global_.size());
  std::copy(global.begin() + offset, global.begin() + offset + n, global_.begin() + offset);
  std::copy(global.begin() + offset, global.begin() + offset + n, after_start_.begin() + offset);
}

}  // namespace geotrain::worker
