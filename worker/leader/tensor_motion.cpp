#include "worker/leader/tensor_motion.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace geotrain::worker {

TensorMotion::TensorMotion(const ParamTable& layout)
    : tensors_(layout.tensors()), sums_(tensors_.size()) {}

void TensorMotion::add(uint64_t at, ConstFloatSpan update, ConstFloatSpan after) {
  GT_REQUIRE(update.size() == after.size(), "tensor motion: an update of {} elements, {} values",
             update.size(), after.size());
  if (update.empty()) return;
  const uint64_t end = at + update.size();
  GT_REQUIRE(!tensors_.empty() && at < end && end <= tensors_.back().offset + tensors_.back().size,
             "tensor motion: elements [{}, {}) lie outside the table", at, end);
  // The first tensor that ends after `at`; the update covers it and those after it up to `end`.
  auto t = std::upper_bound(
      tensors_.begin(), tensors_.end(), at,
      [](uint64_t x, const TensorInfo& info) { return x < info.offset + info.size; });
  for (; t != tensors_.end() && t->offset < end; ++t) {
    const uint64_t lo = std::max(at, t->offset), hi = std::min(end, t->offset + t->size);
    double u = 0.0, v = 0.0;
    for (uint64_t j = lo - at; j < hi - at; ++j) {
      u += double{update[j]} * update[j];
      v += double{after[j]} * after[j];
    }
    auto& s = sums_[static_cast<size_t>(t - tensors_.begin())];
    s.update += u;
    s.values += v;
  }
}

std::vector<TensorMotion::Row> TensorMotion::rows() const {
  std::vector<Row> out;
  out.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& s = sums_[i];
    const double rel = s.values > 0.0 ? std::sqrt(s.update / s.values) : 0.0;
    out.push_back({tensors_[i].name, tensors_[i].size, tensors_[i].critical, rel});
  }
  return out;
}

}  // namespace geotrain::worker
