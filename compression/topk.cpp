// topk: keeps the k = ceil(ratio * n) entries of largest magnitude.
//
// Selection without a full sort: a hashed sample of |x| estimates a threshold a little below
// the k-th largest value; one scan collects the candidates above it (about 1.25k of them), and
// nth_element picks exactly k among those. Ties are broken by index, so the result is exactly
// "the k largest" and deterministic. If the estimate was too high (fewer than k candidates),
// the threshold is lowered and the scan repeated; the last resort is all entries.
//
// Body: values (k x fp32, in index order), then k LEB128 varints: the first index, then the gaps
// between consecutive indices (each >= 1).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "core/error.hpp"
#include "kernels/codec_math.hpp"

namespace geotrain::compression {
namespace {

// |x| as an unsigned key (kernels::abs_bits): a strict weak order for any input, NaN included.
inline uint32_t magnitude_key(float x) { return kernels::abs_bits(x); }

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

std::byte* put_varint(std::byte* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<std::byte>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<std::byte>(v);
  return p;
}

class TopkCodec final : public Codec {
 public:
  explicit TopkCodec(TopkOptions options) : options_(options) {
    GT_REQUIRE(options_.ratio > 0.0 && options_.ratio <= 1.0,
               "topk: ratio {} is invalid: must be in (0, 1]", options_.ratio);
    GT_REQUIRE(options_.sample >= 64 && options_.sample <= (1u << 24),
               "topk: sample {} is invalid: must be in [64, 16777216]", options_.sample);
  }

  CodecId id() const override { return CodecId::topk; }
  bool lossless() const override { return false; }
  std::string spec() const override {
    return fmt::format("topk:ratio={},sample={}", options_.ratio, options_.sample);
  }
  size_t max_payload_bytes(size_t n) const override {
    return kHeaderBytes + topk_count(n, options_.ratio) * (4 + 10);
  }

  void encode(ConstFloatSpan x, Bytes& out) override {
    select(x);
    write(x, out);
  }

  bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) override {
    GT_REQUIRE(g.size() == residual.size(), "{}: input has {} elements but the residual has {}",
               spec(), g.size(), residual.size());
    for (size_t i = 0; i < g.size(); ++i) residual[i] = g[i] + residual[i];
    select(residual);
    write(residual, out);
    for (uint64_t i : selected_) residual[i] = 0.0f;  // x - D(c) is 0 where x was sent exactly
    return true;
  }

  void decode(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, false, CodecId::topk);
  }
  void decode_add(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, true, CodecId::topk);
  }

 private:
  // selected_ = indices of the k largest |x|, ascending.
  void select(ConstFloatSpan x) {
    const uint64_t n = x.size();
    GT_REQUIRE(n <= kMaxElements, "topk: {} elements exceed the payload limit {}", n, kMaxElements);
    const uint64_t k = topk_count(n, options_.ratio);
    selected_.clear();
    if (k == 0) return;

    // Sample |x| at hashed positions and sort the sample, largest first.
    const uint64_t m = std::min<uint64_t>(n, options_.sample);
    sample_.resize(m);
    for (uint64_t s = 0; s < m; ++s) {
      const uint64_t i = m == n ? s : kernels::mix64(0x70b4a11ull + s) % n;
      sample_[s] = magnitude_key(x[i]);
    }
    std::sort(sample_.begin(), sample_.end(), std::greater<>());

    // Aim the sample rank a quarter above k's expected rank, then widen until k are found.
    double rank =
        std::ceil(static_cast<double>(m) * static_cast<double>(k) / static_cast<double>(n) * 1.25) +
        2;
    for (;;) {
      const bool last_resort = rank >= static_cast<double>(m);
      const uint32_t threshold = last_resort ? 0u : sample_[static_cast<size_t>(rank)];
      candidates_.clear();
      for (uint64_t i = 0; i < n; ++i)
        if (magnitude_key(x[i]) >= threshold) candidates_.push_back(i);
      if (candidates_.size() >= k) break;
      GT_ASSERT(!last_resort, "threshold 0 selected {} of {} entries", candidates_.size(), n);
      rank = rank * 2 + 8;
    }

    auto larger = [&](uint64_t a, uint64_t b) {
      const uint32_t ka = magnitude_key(x[a]), kb = magnitude_key(x[b]);
      return ka != kb ? ka > kb : a < b;
    };
    if (candidates_.size() > k) {
      std::nth_element(candidates_.begin(),
                       candidates_.begin() + static_cast<std::ptrdiff_t>(k - 1), candidates_.end(),
                       larger);
      candidates_.resize(k);
    }
    selected_.assign(candidates_.begin(), candidates_.end());
    std::sort(selected_.begin(), selected_.end());
  }

  void write(ConstFloatSpan x, Bytes& out) const {
    const uint64_t k = selected_.size();
    size_t index_bytes = 0;
    uint64_t prev = 0;
    for (size_t j = 0; j < k; ++j) {
      index_bytes += varint_size(j == 0 ? selected_[0] : selected_[j] - prev);
      prev = selected_[j];
    }
    out.resize(kHeaderBytes + 4 * k + index_bytes);
    std::byte* p = out.data() + kHeaderBytes;
    for (uint64_t i : selected_) {
      std::memcpy(p, &x[i], 4);
      p += 4;
    }
    prev = 0;
    for (size_t j = 0; j < k; ++j) {
      p = put_varint(p, j == 0 ? selected_[0] : selected_[j] - prev);
      prev = selected_[j];
    }
    PayloadHeader h;
    h.codec = CodecId::topk;
    h.aux = static_cast<uint32_t>(k);
    h.elements = x.size();
    write_header(h, out);
  }

  TopkOptions options_;
  std::vector<uint32_t> sample_;
  std::vector<uint64_t> candidates_;
  std::vector<uint64_t> selected_;
};

}  // namespace

uint64_t topk_count(uint64_t n, double ratio) {
  if (n == 0) return 0;
  const auto k = static_cast<uint64_t>(std::ceil(static_cast<double>(n) * ratio));
  return std::clamp<uint64_t>(k, 1, n);
}

std::unique_ptr<Codec> make_topk_codec(TopkOptions options) {
  if (options.bits != 0) return detail::make_qtopk_codec(options);
  return std::make_unique<TopkCodec>(options);
}

std::vector<uint64_t> topk_indices(ConstByteSpan body, uint64_t k, uint64_t n) {
  GT_REQUIRE(k <= n, "codec payload: topk: k = {} exceeds the element count {}", k, n);
  GT_REQUIRE(4 * k <= body.size(), "codec payload: topk: body of {} bytes cannot hold {} values",
             body.size(), k);
  // k <= body size, so this allocation is bounded by the message, not by what the header claims.
  std::vector<uint64_t> index(k);
  const auto* p = reinterpret_cast<const uint8_t*>(body.data()) + 4 * k;
  const auto* end = reinterpret_cast<const uint8_t*>(body.data()) + body.size();
  uint64_t prev = 0;
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      GT_REQUIRE(p < end, "codec payload: topk: index {} of {} is truncated", j, k);
      // The 10th byte holds bit 63 only, and must end the varint: a continuation bit there led to
      // a shift by 70 (undefined; found by fuzz/codec_decode.cpp).
      GT_REQUIRE(shift < 63 || *p <= 1, "codec payload: topk: index {} overflows 64 bits", j);
      v |= static_cast<uint64_t>(*p & 0x7f) << shift;
      if (!(*p++ & 0x80)) break;
    }
    GT_REQUIRE(j == 0 || v >= 1, "codec payload: topk: index {} repeats index {}", j, prev);
    const uint64_t i = j == 0 ? v : prev + v;
    GT_REQUIRE(i < n && i >= prev, "codec payload: topk: index {} = {} is out of range [0, {})", j,
               j == 0 ? v : prev + v, n);
    index[j] = prev = i;
  }
  GT_REQUIRE(p == end, "codec payload: topk: {} trailing bytes after the last index", end - p);
  return index;
}

namespace detail {

void decode_topk(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  const uint64_t n = h.elements;
  const uint64_t k = h.aux;
  GT_REQUIRE(h.chunk == 0, "codec payload: topk: chunk field is {}, must be 0", h.chunk);
  const std::vector<uint64_t> index = topk_indices(body, k, n);  // before touching y

  if (!add) std::fill(y.begin(), y.end(), 0.0f);
  const std::byte* values = body.data();
  for (uint64_t j = 0; j < k; ++j) {
    float v;
    std::memcpy(&v, values + 4 * j, 4);
    y[index[j]] = add ? y[index[j]] + v : v;
  }
}

}  // namespace detail
}  // namespace geotrain::compression
