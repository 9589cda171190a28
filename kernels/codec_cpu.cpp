// CPU codec kernels. Written as simple loops over restrict-qualified pointers so that GCC
// vectorises them (-O3); per-chunk work runs in two passes over data that is still in L1.
#include "kernels/codec_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/codec_math.hpp"

#define GT_RESTRICT __restrict__

// A build for any x86-64 machine (GEOTRAIN_NATIVE off: the `portable` preset, the binaries
// shipped to other hosts) carries AVX2 and AVX-512 clones of every entry point below, and the
// loader picks the best the CPU has: without them onebit decodes 15x and int8 encodes 5x slower
// than a native build (measured on the development machine). The clones compute the same bytes:
// GCC vectorises no float reduction it would have to reorder, and -ffp-contract=off holds for
// every clone. A native build (already AVX2 or better) and other compilers get one version.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define GT_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define GT_CPU_CLONES
#endif

namespace geotrain::kernels::cpu {
namespace {

// x = g + residual, written back into residual (EF), or g itself (no EF).
// Returns the buffer holding x for this range.
inline const float* feedback_input(const float* GT_RESTRICT g, float* GT_RESTRICT residual,
                                   size_t n) {
  if (residual == nullptr) return g;
  for (size_t i = 0; i < n; ++i) residual[i] = g[i] + residual[i];
  return residual;
}

template <typename Encode, typename Decode>
inline void elementwise_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                               uint16_t* GT_RESTRICT out, Encode enc, Decode dec) {
  if (residual == nullptr) {
    for (size_t i = 0; i < n; ++i) out[i] = enc(g[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float x = g[i] + residual[i];
    const uint16_t h = enc(x);
    out[i] = h;
    residual[i] = x - dec(h);
  }
}

template <typename Decode>
inline void elementwise_decode(const uint16_t* GT_RESTRICT in, size_t n, float* GT_RESTRICT y,
                               bool add, Decode dec) {
  if (add) {
    for (size_t i = 0; i < n; ++i) y[i] += dec(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = dec(in[i]);
  }
}

inline float chunk_absmax(const float* GT_RESTRICT x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = max_u(m, abs_bits(x[i]));
  return bits_float(m);
}

// Canonical lane sum of f(x) (see codec_math.hpp): lane i % 32, then a pairwise fold.
template <typename F>
inline float chunk_lane_sum(const float* GT_RESTRICT x, size_t n, F f) {
  float lane[kLanes] = {};
  const size_t full = n / kLanes * kLanes;
  for (size_t k = 0; k < full; k += kLanes)
    for (unsigned j = 0; j < kLanes; ++j) lane[j] += f(x[k + j]);
  for (size_t i = full; i < n; ++i) lane[i - full] += f(x[i]);
  for (unsigned offset = kLanes / 2; offset > 0; offset /= 2)
    for (unsigned j = 0; j < offset; ++j) lane[j] += lane[j + offset];
  return lane[0];
}

// The onebit scale of one chunk (codec_cpu.hpp, OnebitScale).
inline float onebit_scale(const float* GT_RESTRICT x, size_t n, OnebitScale kind) {
  const auto count = static_cast<float>(n);
  if (kind == OnebitScale::rms)
    return std::sqrt(chunk_lane_sum(x, n, [](float v) { return v * v; }) / count);
  return chunk_lane_sum(x, n, [](float v) { return abs_f(v); }) / count;
}

// Quantised integer values of one chunk, in order, into out[0, count).
inline void quantize_chunk(const float* GT_RESTRICT x, size_t begin, size_t count, float inv,
                           float levels, Rounding r, int8_t* GT_RESTRICT out) {
  if (r.stochastic) {
    const uint64_t key = rounding_key(r.seed, r.nonce);
    for (size_t i = 0; i < count; ++i) {
      const float u = uniform01_keyed(key, begin + i);
      out[i] = static_cast<int8_t>(quantize(x[i], inv, levels, true, u));
    }
  } else {
    for (size_t i = 0; i < count; ++i)
      out[i] = static_cast<int8_t>(quantize(x[i], inv, levels, false, 0.0f));
  }
}

}  // namespace

GT_CPU_CLONES void fp32_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                               float* GT_RESTRICT out) {
  if (residual == nullptr) {
    if (n > 0) std::memcpy(out, g, n * sizeof(float));  // no null pointers, even for no bytes
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    out[i] = g[i] + residual[i];
    residual[i] = 0.0f;
  }
}

GT_CPU_CLONES void fp32_decode(const float* GT_RESTRICT in, size_t n, float* GT_RESTRICT y,
                               bool add) {
  if (add) {
    for (size_t i = 0; i < n; ++i) y[i] += in[i];
  } else if (n > 0) {  // memcpy's pointers must not be null, even for no bytes
    std::memcpy(y, in, n * sizeof(float));
  }
}

GT_CPU_CLONES void fp16_encode(const float* g, float* residual, size_t n, uint16_t* out) {
  elementwise_encode(g, residual, n, out, fp16_from_float, fp16_to_float);
}
GT_CPU_CLONES void fp16_decode(const uint16_t* in, size_t n, float* y, bool add) {
  elementwise_decode(in, n, y, add, fp16_to_float);
}
GT_CPU_CLONES void bf16_encode(const float* g, float* residual, size_t n, uint16_t* out) {
  elementwise_encode(g, residual, n, out, bf16_from_float, bf16_to_float);
}
GT_CPU_CLONES void bf16_decode(const uint16_t* in, size_t n, float* y, bool add) {
  elementwise_decode(in, n, y, add, bf16_to_float);
}

namespace {
// The chunk loop shared by int8 and int4: EF input, absmax scale, then `pack` quantises and
// packs the chunk (and updates its residual) given x, its offset, count, 1/scale and scale.
template <typename Pack>
inline void quant_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                         uint32_t chunk, float levels, float step, float* GT_RESTRICT scales,
                         Pack pack) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    float* res = residual ? residual + begin : nullptr;
    const float* x = feedback_input(g + begin, res, count);
    if (step > 0.0f) {  // the step from the RMS; values past +-levels steps clip
      scales[c] = step * onebit_scale(x, count, OnebitScale::rms);
      pack(x, res, begin, count, scales[c] > 0.0f ? 1.0f / scales[c] : 0.0f, scales[c]);
    } else {
      const float absmax = chunk_absmax(x, count);
      scales[c] = quant_scale(absmax, levels);
      pack(x, res, begin, count, quant_inv(absmax, levels), scales[c]);
    }
  }
}
}  // namespace

GT_CPU_CLONES void int8_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                               uint32_t chunk, Rounding rounding, float* GT_RESTRICT scales,
                               int8_t* GT_RESTRICT q, float step) {
  constexpr float kLevels = 127.0f;
  quant_encode(g, residual, n, chunk, kLevels, step, scales,
               [&](const float* x, float* res, size_t begin, size_t count, float inv, float scale) {
                 int8_t* out = q + begin;
                 quantize_chunk(x, begin, count, inv, kLevels, rounding, out);
                 if (res != nullptr)
                   for (size_t i = 0; i < count; ++i)
                     res[i] = x[i] - static_cast<float>(out[i]) * scale;
               });
}

GT_CPU_CLONES void int8_decode(const float* GT_RESTRICT scales, const int8_t* GT_RESTRICT q,
                               size_t n, uint32_t chunk, float* GT_RESTRICT y, bool add) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    const float scale = scales[c];
    const int8_t* in = q + begin;
    float* out = y + begin;
    if (add) {
      for (size_t i = 0; i < count; ++i) out[i] += static_cast<float>(in[i]) * scale;
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]) * scale;
    }
  }
}

namespace {
inline int int4_nibble(const uint8_t* packed, size_t i) {
  const unsigned byte = packed[i / 2];
  const unsigned nib = (i & 1) ? (byte >> 4) : (byte & 0xFu);
  return static_cast<int>(nib ^ 8u) - 8;  // sign-extend 4 bits
}
}  // namespace

GT_CPU_CLONES void int4_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                               uint32_t chunk, Rounding rounding, float* GT_RESTRICT scales,
                               uint8_t* GT_RESTRICT packed, float step) {
  constexpr float kLevels = 7.0f;
  // chunk is even (a multiple of 32), so a byte never straddles two chunks.
  quant_encode(
      g, residual, n, chunk, kLevels, step, scales,
      [&](const float* x, float* res, size_t begin, size_t count, float inv, float scale) {
        int8_t values[1024];
        for (size_t part = 0; part < count; part += sizeof values) {
          const size_t m = std::min(sizeof values, count - part);
          quantize_chunk(x + part, begin + part, m, inv, kLevels, rounding, values);
          uint8_t* out = packed + (begin + part) / 2;
          for (size_t i = 0; i < m / 2; ++i)
            out[i] = static_cast<uint8_t>((values[2 * i] & 0xF) | ((values[2 * i + 1] & 0xF) << 4));
          if (m & 1) out[m / 2] = static_cast<uint8_t>(values[m - 1] & 0xF);
          if (res != nullptr)
            for (size_t i = 0; i < m; ++i)
              res[part + i] = x[part + i] - static_cast<float>(values[i]) * scale;
        }
      });
}

GT_CPU_CLONES void int4_decode(const float* GT_RESTRICT scales, const uint8_t* GT_RESTRICT packed,
                               size_t n, uint32_t chunk, float* GT_RESTRICT y, bool add) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    const float scale = scales[c];
    const uint8_t* in = packed + begin / 2;
    float* out = y + begin;
    const size_t pairs = count / 2;
    if (add) {
      for (size_t i = 0; i < pairs; ++i) {
        const int b = in[i];
        out[2 * i] += static_cast<float>(((b & 0xF) ^ 8) - 8) * scale;
        out[2 * i + 1] += static_cast<float>(((b >> 4) ^ 8) - 8) * scale;
      }
    } else {
      for (size_t i = 0; i < pairs; ++i) {
        const int b = in[i];
        out[2 * i] = static_cast<float>(((b & 0xF) ^ 8) - 8) * scale;
        out[2 * i + 1] = static_cast<float>(((b >> 4) ^ 8) - 8) * scale;
      }
    }
    if (count & 1) {
      const float v = static_cast<float>(int4_nibble(in, count - 1)) * scale;
      out[count - 1] = add ? out[count - 1] + v : v;
    }
  }
}

GT_CPU_CLONES void fp4_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                              uint32_t chunk, float* GT_RESTRICT scales,
                              uint8_t* GT_RESTRICT packed) {
  // chunk is even (a multiple of 32), so a byte never straddles two chunks.
  quant_encode(g, residual, n, chunk, kFp4Max, 0.0f, scales,
               [&](const float* x, float* res, size_t begin, size_t count, float inv, float scale) {
                 uint8_t* out = packed + begin / 2;
                 for (size_t i = 0; i < count / 2; ++i)
                   out[i] = static_cast<uint8_t>(fp4_code(x[2 * i], inv) |
                                                 (fp4_code(x[2 * i + 1], inv) << 4));
                 if (count & 1) out[count / 2] = static_cast<uint8_t>(fp4_code(x[count - 1], inv));
                 if (res != nullptr) {
                   // x - D(code) through the chunk's 16 decoded values (fp4_value itself, as
                   // on the GPU): a lookup instead of the magnitude's shifts vectorises better.
                   float table[16];
                   for (unsigned code = 0; code < 16; ++code) table[code] = fp4_value(code, scale);
                   for (size_t i = 0; i < count; ++i)
                     res[i] = x[i] - table[(out[i / 2] >> (4 * (i & 1))) & 0xFu];
                 }
               });
}

GT_CPU_CLONES void fp4_decode(const float* GT_RESTRICT scales, const uint8_t* GT_RESTRICT packed,
                              size_t n, uint32_t chunk, float* GT_RESTRICT y, bool add) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    // The chunk's 16 decoded values (fp4_value itself, so the CUDA decoder agrees), then lookups.
    float table[16];
    for (unsigned code = 0; code < 16; ++code) table[code] = fp4_value(code, scales[c]);
    const uint8_t* in = packed + begin / 2;
    float* out = y + begin;
    const size_t pairs = count / 2;
    if (add) {
      for (size_t i = 0; i < pairs; ++i) {
        out[2 * i] += table[in[i] & 0xFu];
        out[2 * i + 1] += table[in[i] >> 4];
      }
    } else {
      for (size_t i = 0; i < pairs; ++i) {
        out[2 * i] = table[in[i] & 0xFu];
        out[2 * i + 1] = table[in[i] >> 4];
      }
    }
    if (count & 1) {
      const float v = table[in[pairs] & 0xFu];
      out[count - 1] = add ? out[count - 1] + v : v;
    }
  }
}

GT_CPU_CLONES void onebit_encode(const float* GT_RESTRICT g, float* GT_RESTRICT residual, size_t n,
                                 uint32_t chunk, float* GT_RESTRICT scales,
                                 uint32_t* GT_RESTRICT bits, OnebitScale scale_kind) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    float* res = residual ? residual + begin : nullptr;
    const float* x = feedback_input(g + begin, res, count);
    const float scale = onebit_scale(x, count, scale_kind);
    scales[c] = scale;
    uint32_t* words = bits + begin / kBitsPerWord;
    for (size_t k = 0; k < count; k += kBitsPerWord) {
      const size_t m = std::min<size_t>(kBitsPerWord, count - k);
      const float* xs = x + k;
      uint32_t w = 0;
      if (m == kBitsPerWord) {  // fixed trip count: vectorised as compare, mask, or-reduce
        for (unsigned j = 0; j < kBitsPerWord; ++j) w |= static_cast<uint32_t>(xs[j] < 0.0f) << j;
      } else {
        for (unsigned j = 0; j < m; ++j) w |= static_cast<uint32_t>(xs[j] < 0.0f) << j;
      }
      words[k / kBitsPerWord] = w;
    }
    if (res != nullptr) {
      for (size_t i = 0; i < count; ++i) res[i] = x[i] - (x[i] < 0.0f ? -scale : scale);
    }
  }
}

GT_CPU_CLONES void onebit_decode(const float* GT_RESTRICT scales, const uint32_t* GT_RESTRICT bits,
                                 size_t n, uint32_t chunk, float* GT_RESTRICT y, bool add) {
  for (size_t c = 0, begin = 0; begin < n; ++c, begin += chunk) {
    const size_t count = std::min<size_t>(chunk, n - begin);
    const float scale = scales[c];
    const uint32_t* words = bits + begin / kBitsPerWord;
    float* out = y + begin;
    const size_t full = count / kBitsPerWord * kBitsPerWord;
    for (size_t k = 0; k < full; k += kBitsPerWord) {
      const uint32_t w = words[k / kBitsPerWord];
      if (add) {
        for (unsigned j = 0; j < kBitsPerWord; ++j) out[k + j] += onebit_value(w, j, scale);
      } else {
        for (unsigned j = 0; j < kBitsPerWord; ++j) out[k + j] = onebit_value(w, j, scale);
      }
    }
    for (size_t i = full; i < count; ++i) {
      const float v =
          onebit_value(words[i / kBitsPerWord], static_cast<unsigned>(i % kBitsPerWord), scale);
      out[i] = add ? out[i] + v : v;
    }
  }
}

}  // namespace geotrain::kernels::cpu
