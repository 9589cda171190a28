// qtopk: topk with chunked selection and quantised values, the codec of "topk:ratio=R,bits=B"
// (SparseLoCo-style). In each chunk of `chunk` elements it keeps the k = ceil(ratio * chunk)
// largest |x| (ties: lower index), and sends each as `bits` bits: a sign and a magnitude level of
// the chunk's absmax (kernels/codec_math.hpp, qtopk_code), with indices relative to the chunk in
// bit_width(chunk - 1) bits. Layout and packing: kernels/qtopk.hpp; this file owns the header
// fields and validation.
//
// Header: chunk = the chunk; aux = k per full chunk (bits 0-23) | value bits (bits 24-31). The
// body size follows from (elements, chunk, k, bits), so it is checked exactly.
#include "kernels/qtopk.hpp"

#include <cstring>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "core/error.hpp"

namespace geotrain::compression {
namespace {

namespace kc = geotrain::kernels;

constexpr uint32_t kAuxKMask = 0x00ffffffu;

bool valid_bits(uint32_t bits) { return bits == 2 || bits == 4 || bits == 8; }

class QtopkCodec final : public detail::OnePassCodec {
 public:
  explicit QtopkCodec(const TopkOptions& options) : options_(options) {
    GT_REQUIRE(options_.ratio > 0.0 && options_.ratio <= 1.0,
               "topk: ratio {} is invalid: must be in (0, 1]", options_.ratio);
    GT_REQUIRE(valid_bits(options_.bits), "topk: bits {} is invalid: must be 2, 4 or 8",
               options_.bits);
    detail::require_chunk(options_.chunk, "topk");
    k_ = static_cast<uint32_t>(topk_count(options_.chunk, options_.ratio));
  }

  CodecId id() const override { return CodecId::qtopk; }
  bool lossless() const override { return false; }
  std::string spec() const override {
    return fmt::format("topk:ratio={},bits={},chunk={}", options_.ratio, options_.bits,
                       options_.chunk);
  }
  size_t max_payload_bytes(size_t n) const override {
    return kHeaderBytes + layout(n).body_bytes();
  }

 private:
  kc::QtopkLayout layout(uint64_t n) const { return {n, options_.chunk, k_, options_.bits}; }

  void encode_into(const float* g, float* residual, size_t n, Bytes& out) override {
    GT_REQUIRE(n <= kMaxElements, "{}: {} elements exceed the payload limit {}", spec(), n,
               kMaxElements);
    const kc::QtopkLayout l = layout(n);
    out.resize(kHeaderBytes + l.body_bytes());
    std::byte* body = out.data() + kHeaderBytes;
    GT_ASSERT(reinterpret_cast<uintptr_t>(body) % alignof(float) == 0, "misaligned payload body");
    scratch_.resize(options_.chunk);
    kc::cpu::qtopk_encode(g, residual, l, reinterpret_cast<float*>(body),
                          reinterpret_cast<uint8_t*>(body + l.values_offset()),
                          reinterpret_cast<uint8_t*>(body + l.indices_offset()), scratch_.data());
    PayloadHeader h;
    h.codec = CodecId::qtopk;
    h.chunk = options_.chunk;
    h.aux = k_ | (options_.bits << 24);
    h.elements = n;
    write_header(h, out);
  }

  TopkOptions options_;
  uint32_t k_ = 0;
  std::vector<uint64_t> scratch_;
};

}  // namespace

namespace detail {

std::unique_ptr<Codec> make_qtopk_codec(const TopkOptions& options) {
  return std::make_unique<QtopkCodec>(options);
}

void decode_qtopk(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  require_chunk(h.chunk, "codec payload: qtopk");
  const uint32_t k = h.aux & kAuxKMask;
  const uint32_t bits = h.aux >> 24;
  GT_REQUIRE(valid_bits(bits), "codec payload: qtopk: value bits {} is invalid (allowed: 2, 4, 8)",
             bits);
  GT_REQUIRE(k >= 1 && k <= h.chunk,
             "codec payload: qtopk: k = {} per chunk is invalid: must be in [1, chunk {}]", k,
             h.chunk);
  const kc::QtopkLayout l{h.elements, h.chunk, k, bits};
  GT_REQUIRE(body.size() == l.body_bytes(),
             "codec payload: qtopk: body is {} bytes, but {} elements in chunks of {} with k = {} "
             "and {}-bit values need {}",
             body.size(), h.elements, h.chunk, k, bits, l.body_bytes());
  std::vector<float> aligned;
  const std::byte* data = float_aligned(body, aligned);
  const auto* scales = reinterpret_cast<const float*>(data);
  const auto* values = reinterpret_cast<const uint8_t*>(data + l.values_offset());
  const auto* indices = reinterpret_cast<const uint8_t*>(data + l.indices_offset());

  // Every index in its chunk and strictly increasing, before anything is written.
  const uint32_t width = l.index_bits();
  for (uint64_t c = 0; c < l.chunks(); ++c) {
    const uint8_t* stream = indices + c * l.index_stride();
    const uint32_t count = l.count(c);
    uint32_t prev = 0;
    for (uint32_t j = 0; j < l.k_of(c); ++j) {
      const uint32_t i = kc::read_bits(stream, uint64_t(j) * width, width);
      GT_REQUIRE(i < count,
                 "codec payload: qtopk: index {} of chunk {} is {}, out of range [0, {})", j, c, i,
                 count);
      GT_REQUIRE(j == 0 || i > prev,
                 "codec payload: qtopk: index {} of chunk {} is {}, not above the previous {}", j,
                 c, i, prev);
      prev = i;
    }
  }
  kc::cpu::qtopk_decode(l, scales, values, indices, y.data(), add);
}

}  // namespace detail
}  // namespace geotrain::compression
