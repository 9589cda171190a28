// The codecs, built explicitly (no registry). make_codec() in factory.hpp builds them from
// spec strings; these functions are for code that already has typed options.
//
//   fp32     identity (lossless), 32 bits/element
//   fp16     IEEE half, round to nearest even, 16 bits/element
//   bf16     bfloat16, round to nearest even, 16 bits/element
//   int8     per-chunk absmax scale (or a step of some RMS), 8 + 32/chunk bits/element
//   int4     per-chunk absmax scale (or a step of some RMS), 4 + 32/chunk bits/element
//   onebit   sign + per-chunk mean |x| (the MSE-optimal scale for the sign pattern), 1 + 32/chunk;
//            or with OnebitScale::rms, sqrt(mean x^2) (keeps the chunk's L2 norm), same payload
//   fp4      E2M1 (OCP MX FP4) with a per-chunk scale absmax/6, 4 + 32/chunk bits/element
//   topk     the k = ceil(ratio*n) largest |x|: fp32 values + delta-varint indices
//   topk with bits = 2, 4 or 8 (wire id qtopk): the k = ceil(ratio*chunk) largest |x| of each
//            chunk, values as sign + level of the chunk's absmax, chunk-relative packed indices
//   powersgd the rank-r factorisation P Q^T of a matrix (Vogels et al. 2019: one power iteration
//            from the stream's last Q, P orthonormalised), P and Q in fp32: 32 r (rows + cols)
//            bits per rows x cols matrix; a span without a matrix shape goes through a named
//            fallback codec (fp16 unless said)
//   +zstd    a zstd stage after any of the above
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "compression/codec.hpp"
#include "kernels/codec_cpu.hpp"

namespace geotrain::compression {

inline constexpr uint32_t kDefaultChunk = 1024;
// The range of QuantOptions::step (besides 0), in multiples of the chunk's RMS.
inline constexpr float kMinStep = 1.0f / 64;
inline constexpr float kMaxStep = 16.0f;

// onebit's per-chunk scale: mean |x| or sqrt(mean x^2) (kernels/codec_cpu.hpp says why).
using OnebitScale = kernels::OnebitScale;

struct QuantOptions {
  uint32_t chunk = kDefaultChunk;  // multiple of 32, in [32, 2^20]
  bool stochastic = false;         // unbiased stochastic rounding instead of round-to-nearest
  uint64_t seed = 0;               // seed of the counter-based RNG (stochastic only)
  // int8, int4: 0 scales each chunk by its absmax (nothing clips); > 0 makes the quantisation
  // step this many times the chunk's RMS, clipping past +-levels steps (kernels/codec_cpu.hpp).
  float step = 0.0f;
};

struct TopkOptions {
  double ratio = 0.01;     // fraction of entries kept, in (0, 1]
  uint32_t sample = 4096;  // entries sampled to estimate the threshold (bits == 0 only)
  // 0: exact fp32 values, one global selection. 2, 4, 8: chunked selection (k = ceil(ratio *
  // chunk) per chunk) and values quantised to this many bits (the qtopk payload).
  uint32_t bits = 0;
  uint32_t chunk = kDefaultChunk;  // selection chunk (bits != 0 only), as for int8
};

inline constexpr uint32_t kMaxPowerSgdRank = 256;
// Pieces in one powersgd payload (Codec::encode_pieces), and the bytes a payload of n elements
// in as many pieces as it may have can take: a table entry and a header per piece, and a
// matrix's factors (r (rows + cols) <= 2 rows cols floats) or a dense code (at most 8 bytes an
// element: onebit's scale and word for one element) per element.
inline constexpr uint32_t kMaxPowerSgdPieces = 1u << 16;
inline uint64_t powersgd_max_payload_bytes(uint64_t n) {
  return kHeaderBytes + 8 + 56 * std::min<uint64_t>(n, kMaxPowerSgdPieces) + 8 * n;
}

struct PowerSgdOptions {
  uint32_t rank = 4;  // in [1, kMaxPowerSgdRank]; a matrix gets min(rank, rows, cols)
  CodecId fallback = CodecId::fp16;  // for spans that are not matrices: fp32, fp16, bf16, int8,
                                     // int4, fp4 or onebit, with their default options
  uint64_t seed = 0;  // of the first Q of each stream (normal, per stream and column)
};

// A codec spec (compression/factory.hpp) as typed settings: what make_codec builds from, and what
// code that encodes elsewhere (compression/device_feedback.hpp) reads its parameters from.
struct CodecSettings {
  CodecId id = CodecId::fp32;  // the codec before any zstd stage (qtopk for topk with bits)
  QuantOptions quant;          // int8, int4: all of it; onebit, fp4: chunk
  OnebitScale onebit_scale = OnebitScale::mean;
  TopkOptions topk;               // topk, qtopk
  PowerSgdOptions powersgd;       // powersgd
  std::optional<int> zstd_level;  // a zstd stage after the codec, at this level
};

std::unique_ptr<Codec> make_fp32_codec();
std::unique_ptr<Codec> make_fp16_codec();
std::unique_ptr<Codec> make_bf16_codec();
std::unique_ptr<Codec> make_int8_codec(QuantOptions options = {});
std::unique_ptr<Codec> make_int4_codec(QuantOptions options = {});
std::unique_ptr<Codec> make_fp4_codec(uint32_t chunk = kDefaultChunk);
std::unique_ptr<Codec> make_onebit_codec(uint32_t chunk = kDefaultChunk,
                                         OnebitScale scale = OnebitScale::mean);
// options.bits == 0: topk; 2, 4 or 8: qtopk.
std::unique_ptr<Codec> make_topk_codec(TopkOptions options = {});
// InputError when options.rank or options.fallback is not allowed.
std::unique_ptr<Codec> make_powersgd_codec(PowerSgdOptions options = {});
// zstd after `inner`; level in [1, 19].
std::unique_ptr<Codec> make_zstd_stage(std::unique_ptr<Codec> inner, int level = 3);

// k that topk keeps out of n entries.
uint64_t topk_count(uint64_t n, double ratio);

// The k indices of a topk body (k fp32 values, then the varints), each checked as decode checks
// it: none truncated, repeated or past n, nothing after the last. For a receiver that scatters
// the values itself (on a device); decode() calls it. Throws InputError naming what is wrong.
std::vector<uint64_t> topk_indices(ConstByteSpan body, uint64_t k, uint64_t n);

}  // namespace geotrain::compression
