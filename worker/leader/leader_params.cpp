#include "worker/leader/leader_params.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

HostTable LeaderParams::host_table(size_t n) {
  return {new float[n](), n, [](float* p) { delete[] p; }};
}

void HostLeaderParams::start(const ElementRange& r, FloatSpan push) {
  GT_ASSERT(rule_ != nullptr, "overlap start without an overlap rule");
  rule_->start(r.offset, r.count, x_, push);
}

void HostLeaderParams::merge(const ElementRange& r, ConstFloatSpan global) {
  GT_ASSERT(rule_ != nullptr, "overlap merge without an overlap rule");
  rule_->merge(r.offset, r.count, x_, global);
}

void HostLeaderParams::take_global(const ElementRange& r, ConstFloatSpan global) {
  GT_ASSERT(r.end() <= x_.size() && r.end() <= global.size(), "take_global: range past the table");
  std::copy(global.begin() + r.offset, global.begin() + r.end(), x_.begin() + r.offset);
  if (rule_) rule_->take_global(r.offset, r.count, global);
}

void HostLeaderParams::read(const ElementRange& r, FloatSpan to) {
  GT_ASSERT(r.end() <= x_.size() && r.end() <= to.size(), "read: range past the table");
  std::copy(x_.begin() + r.offset, x_.begin() + r.end(), to.begin() + r.offset);
}

std::unique_ptr<OverlapMerge> HostLeaderParams::to_host(FloatSpan x) {
  if (x.data() != x_.data()) std::copy(x_.begin(), x_.end(), x.begin());
  return std::move(rule_);
}

}  // namespace geotrain::worker
