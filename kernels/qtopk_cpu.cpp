// CPU qtopk kernels (layout and rules in qtopk.hpp).
//
// Selection per chunk without sorting the chunk: each entry becomes one 64-bit rank key,
// (abs_bits(x) << 32) | ~index, so that "larger key" is exactly "larger |x|, then lower index".
// For a small k_c (the usual 1-3%) a min-heap of the k_c largest keys so far rejects almost every
// entry with one compare; for a large k_c, nth_element. A sort of the k_c winners then puts them
// in index order. Both find the same set: the order is total.
#include <algorithm>
#include <functional>

#include "kernels/qtopk.hpp"

namespace geotrain::kernels::cpu {

void qtopk_encode(const float* g, float* residual, const QtopkLayout& layout, float* scales,
                  uint8_t* values, uint8_t* indices, uint64_t* scratch) {
  const uint64_t nc = layout.chunks();
  const float levels = layout.levels();
  const uint32_t width = layout.index_bits();
  for (uint64_t c = 0; c < nc; ++c) {
    const uint64_t begin = c * layout.chunk;
    const uint32_t count = layout.count(c);
    const uint32_t k = layout.k_of(c);
    const float* x = g + begin;
    if (residual != nullptr) {
      float* e = residual + begin;
      for (uint32_t i = 0; i < count; ++i) e[i] = g[begin + i] + e[i];
      x = e;
    }
    uint32_t absmax_bits = 0;
    for (uint32_t i = 0; i < count; ++i) absmax_bits = max_u(absmax_bits, abs_bits(x[i]));
    auto rank_key = [&](uint32_t i) { return (uint64_t(abs_bits(x[i])) << 32) | uint32_t(~i); };
    if (uint64_t(k) * 8 < count) {
      for (uint32_t i = 0; i < k; ++i) scratch[i] = rank_key(i);
      std::make_heap(scratch, scratch + k, std::greater<>());  // scratch[0]: the smallest kept
      for (uint32_t i = k; i < count; ++i) {
        const uint64_t key = rank_key(i);
        if (key <= scratch[0]) continue;
        std::pop_heap(scratch, scratch + k, std::greater<>());
        scratch[k - 1] = key;
        std::push_heap(scratch, scratch + k, std::greater<>());
      }
    } else {
      for (uint32_t i = 0; i < count; ++i) scratch[i] = rank_key(i);
      if (k < count)
        std::nth_element(scratch, scratch + (k - 1), scratch + count, std::greater<>());
    }
    uint64_t* chosen = scratch;  // the k largest rank keys, then their indices ascending
    for (uint32_t j = 0; j < k; ++j) chosen[j] = uint32_t(~uint32_t(chosen[j]));
    std::sort(chosen, chosen + k);

    const float absmax = bits_float(absmax_bits);
    const float inv = quant_inv(absmax, levels);
    scales[c] = absmax;
    uint8_t* vals = values + c * layout.value_stride();
    uint8_t* idx = indices + c * layout.index_stride();
    const uint64_t value_bytes = QtopkLayout::stream_bytes(k, layout.bits);
    for (uint64_t t = 0; t < value_bytes; ++t)
      vals[t] = stream_byte(t, layout.bits, k,
                            [&](uint64_t j) { return qtopk_code(x[chosen[j]], inv, levels); });
    const uint64_t index_bytes = QtopkLayout::stream_bytes(k, width);
    for (uint64_t t = 0; t < index_bytes; ++t)
      idx[t] = stream_byte(t, width, k, [&](uint64_t j) { return chosen[j]; });
    if (residual != nullptr) {
      float* e = residual + begin;
      for (uint32_t j = 0; j < k; ++j) {
        const uint64_t i = chosen[j];
        e[i] = e[i] - qtopk_value(qtopk_code(e[i], inv, levels), absmax, levels);
      }
    }
  }
}

void qtopk_decode(const QtopkLayout& layout, const float* scales, const uint8_t* values,
                  const uint8_t* indices, float* y, bool add) {
  if (!add) std::fill(y, y + layout.n, 0.0f);
  const uint64_t nc = layout.chunks();
  const float levels = layout.levels();
  const uint32_t width = layout.index_bits();
  for (uint64_t c = 0; c < nc; ++c) {
    const uint32_t k = layout.k_of(c);
    const uint8_t* vals = values + c * layout.value_stride();
    const uint8_t* idx = indices + c * layout.index_stride();
    float* out = y + c * layout.chunk;
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = read_bits(idx, uint64_t(j) * width, width);
      const float v =
          qtopk_value(read_bits(vals, uint64_t(j) * layout.bits, layout.bits), scales[c], levels);
      out[i] = add ? out[i] + v : v;
    }
  }
}

}  // namespace geotrain::kernels::cpu
