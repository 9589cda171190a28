#include "worker/overlap_merge.hpp"

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

OverlapMerge::OverlapMerge(OverlapMode mode, OuterStepConfig outer, uint32_t regions,
                           ConstFloatSpan global)
    : mode_(mode),
      outer_(outer, mode == OverlapMode::carry ? 0 : global.size()),
      inv_regions_(1.0f / static_cast<float>(regions)),
      global_(global.begin(), global.end()),
      after_start_(global.begin(), global.end()) {
  GT_REQUIRE(regions >= 1, "overlap: regions is 0");
  GT_ASSERT(mode != OverlapMode::off, "OverlapMerge without overlap");
  if (mode == OverlapMode::delayed) {
    last_push_.assign(global.size(), 0.0f);
    others_.assign(global.size(), 0.0f);
  }
}

// start() and merge() make one pass over their range each (the parameters of a large model are
// hundreds of megabytes: every pass is time the region's steps wait for).
void OverlapMerge::start(uint64_t offset, uint64_t n, FloatSpan x, FloatSpan push) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && push.size() == global_.size(),
      "overlap start: range [{}, {}) of {}", offset, offset + n, global_.size());
  float* xr = x.data() + offset;
  float* pr = push.data() + offset;
  float* after = after_start_.data() + offset;
  const float* g = global_.data() + offset;
  if (mode_ == OverlapMode::carry) {
    // The push is the local value itself (theta_g + q with q = x - theta_g), and x stays.
    std::copy(xr, xr + n, pr);
    std::copy(xr, xr + n, after);
    return;
  }
  const bool delayed = mode_ == OverlapMode::delayed;
  for (uint64_t i = 0; i < n; ++i) {
    pr[i] = xr[i];
    // d = q / R (+ the others' last share): the predicted average outer gradient.
    float d = (xr[i] - g[i]) * inv_regions_;
    if (delayed) {
      last_push_[offset + i] = xr[i] - g[i];
      d += others_[offset + i];
    }
    xr[i] = g[i] + outer_.predict_at(offset + i, d);
    after[i] = xr[i];
  }
}

void OverlapMerge::merge(uint64_t offset, uint64_t n, FloatSpan x, ConstFloatSpan global) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && global.size() == global_.size(),
      "overlap merge: range [{}, {}) of {}", offset, offset + n, global_.size());
  float* xr = x.data() + offset;
  const float* gn = global.data() + offset;
  float* g = global_.data() + offset;
  const float* a = after_start_.data() + offset;
  const bool observe = mode_ != OverlapMode::carry, delayed = mode_ == OverlapMode::delayed;
  for (uint64_t i = 0; i < n; ++i) {
    if (observe) {
      // What the servers did: recover the average outer gradient (and their momentum).
      const float d = outer_.observe_at(offset + i, gn[i] - g[i]);
      if (delayed) others_[offset + i] = d - last_push_[offset + i] * inv_regions_;
    }
    xr[i] = gn[i] + (xr[i] - a[i]);
    g[i] = gn[i];
  }
}

void OverlapMerge::take_global(uint64_t offset, uint64_t n, ConstFloatSpan global) {
  GT_ASSERT(offset + n <= global_.size() && global.size() == global_.size(),
            "overlap: range [{}, {}) of {}", offset, offset + n, global_.size());
  std::copy(global.begin() + offset, global.begin() + offset + n, global_.begin() + offset);
  std::copy(global.begin() + offset, global.begin() + offset + n, after_start_.begin() + offset);
}

}  // namespace geotrain::worker
