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
  const float inv_lr = 1.0f / config_.lr, mu = config_.momentum;
  const size_t n = change.size();
  if (momentum_.empty()) {
    for (size_t i = 0; i < n; ++i) gradient[i] = change[i] * inv_lr;
    return;
  }
  GT_ASSERT(offset + n <= momentum_.size(), "observe: range past the table");
  float* m = momentum_.data() + offset;
  if (config_.nesterov) {
    const float inv = 1.0f / (1.0f + mu), mu2 = mu * mu;
    for (size_t i = 0; i < n; ++i) {
      const float d = (change[i] * inv_lr - mu2 * m[i]) * inv;
      gradient[i] = d;
      m[i] = mu * m[i] + d;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float m_new = change[i] * inv_lr;
      gradient[i] = m_new - mu * m[i];
      m[i] = m_new;
    }
  }
}

void OuterStepModel::predict(uint64_t offset, ConstFloatSpan d, FloatSpan out) const {
  GT_ASSERT(out.size() == d.size(), "predict: {} vs {}", out.size(), d.size());
  const float lr = config_.lr, mu = config_.momentum;
  const size_t n = d.size();
  if (momentum_.empty()) {
    for (size_t i = 0; i < n; ++i) out[i] = lr * d[i];
    return;
  }
  GT_ASSERT(offset + n <= momentum_.size(), "predict: range past the table");
  const float* m = momentum_.data() + offset;
  for (size_t i = 0; i < n; ++i) {
    const float m_new = mu * m[i] + d[i];
    out[i] = config_.nesterov ? lr * (d[i] + mu * m_new) : lr * m_new;
  }
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

void OverlapMerge::start(uint64_t offset, uint64_t n, FloatSpan x, FloatSpan push) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && push.size() == global_.size(),
      "overlap start: range [{}, {}) of {}", offset, offset + n, global_.size());
  float* xr = x.data() + offset;
  const float* g = global_.data() + offset;
  // The push is the local value itself: theta_g + q with q = x - theta_g.
  std::copy(xr, xr + n, push.data() + offset);
  if (mode_ != OverlapMode::carry) {
    // d = q / R (+ the others' last share): the predicted average outer gradient.
    scratch_.resize(n);
    scratch2_.resize(n);
    for (uint64_t i = 0; i < n; ++i) scratch_[i] = (xr[i] - g[i]) * inv_regions_;
    if (mode_ == OverlapMode::delayed) {
      for (uint64_t i = 0; i < n; ++i) {
        last_push_[offset + i] = xr[i] - g[i];
        scratch_[i] += others_[offset + i];
      }
    }
    outer_.predict(offset, scratch_, scratch2_);
    for (uint64_t i = 0; i < n; ++i) xr[i] = g[i] + scratch2_[i];
  }
  std::copy(xr, xr + n, after_start_.data() + offset);
}

void OverlapMerge::merge(uint64_t offset, uint64_t n, FloatSpan x, ConstFloatSpan global) {
  GT_ASSERT(
      offset + n <= global_.size() && x.size() == global_.size() && global.size() == global_.size(),
      "overlap merge: range [{}, {}) of {}", offset, offset + n, global_.size());
  float* xr = x.data() + offset;
  const float* gn = global.data() + offset;
  float* g = global_.data() + offset;
  if (mode_ != OverlapMode::carry) {
    // What the servers did: recover the average outer gradient (and their momentum).
    scratch_.resize(n);
    scratch2_.resize(n);
    for (uint64_t i = 0; i < n; ++i) scratch_[i] = gn[i] - g[i];
    outer_.observe(offset, scratch_, scratch2_);
    if (mode_ == OverlapMode::delayed)
      for (uint64_t i = 0; i < n; ++i)
        others_[offset + i] = scratch2_[i] - last_push_[offset + i] * inv_regions_;
  }
  const float* a = after_start_.data() + offset;
  for (uint64_t i = 0; i < n; ++i) xr[i] = gn[i] + (xr[i] - a[i]);
  std::copy(gn, gn + n, g);
}

void OverlapMerge::take_global(uint64_t offset, uint64_t n, ConstFloatSpan global) {
  GT_ASSERT(offset + n <= global_.size() && global.size() == global_.size(),
            "overlap: range [{}, {}) of {}", offset, offset + n, global_.size());
  std::copy(global.begin() + offset, global.begin() + offset + n, global_.begin() + offset);
  std::copy(global.begin() + offset, global.begin() + offset + n, after_start_.begin() + offset);
}

}  // namespace geotrain::worker
