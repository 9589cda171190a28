#include "server/shard_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/error.hpp"

#define GT_RESTRICT __restrict__

namespace geotrain::server {

bool all_finite(ConstFloatSpan x) {
  // Exponent bits all ones is exactly NaN or infinity. An OR-reduction over integer compares has
  // no early exit and no branch, so it vectorises; blocks bound the work past a bad element.
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr size_t kBlock = 4096;
  const float* GT_RESTRICT p = x.data();
  for (size_t begin = 0; begin < x.size(); begin += kBlock) {
    const size_t end = std::min(x.size(), begin + kBlock);
    uint32_t bad = 0;
    for (size_t i = begin; i < end; ++i)
      bad |= (std::bit_cast<uint32_t>(p[i]) & kExponent) == kExponent;
    if (bad) return false;
  }
  return true;
}

void take_change(ConstFloatSpan values, FloatSpan sent, FloatSpan g) {
  GT_ASSERT(values.size() == sent.size() && g.size() == values.size(),
            "take_change sizes: {} {} {}", values.size(), sent.size(), g.size());
  const float* GT_RESTRICT v = values.data();
  float* GT_RESTRICT s = sent.data();
  float* GT_RESTRICT out = g.data();
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = v[i] - s[i];
    s[i] = v[i];
  }
}

}  // namespace geotrain::server
