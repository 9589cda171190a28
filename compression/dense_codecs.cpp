// fp32, fp16, bf16, int8, int4, fp4 and onebit: codecs whose body size depends only on the element
// count and chunk. Packing is done by kernels/codec_cpu; this file owns layout and validation.
#include <cmath>
#include <cstring>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "core/error.hpp"
#include "kernels/codec_cpu.hpp"

namespace geotrain::compression {

namespace kc = geotrain::kernels;

namespace detail {

bool is_chunked(CodecId id) {
  return id == CodecId::int8 || id == CodecId::int4 || id == CodecId::fp4 || id == CodecId::onebit;
}

bool is_dense(CodecId id) {
  return id == CodecId::fp32 || id == CodecId::fp16 || id == CodecId::bf16 || is_chunked(id);
}

// Exact body size of a dense codec; callers bound n by kMaxElements, so nothing overflows.
uint64_t dense_body_bytes(CodecId id, uint64_t n, uint32_t chunk) {
  const uint64_t scales = is_chunked(id) ? 4 * kc::chunk_count(n, chunk) : 0;
  switch (id) {
    case CodecId::fp32:
      return 4 * n;
    case CodecId::fp16:
    case CodecId::bf16:
      return 2 * n;
    case CodecId::int8:
      return scales + n;
    case CodecId::int4:
    case CodecId::fp4:
      return scales + kc::int4_byte_count(n);
    case CodecId::onebit:
      return scales + 4 * kc::onebit_word_count(n);
    default:
      GT_ASSERT(false, "{} is not a dense codec", codec_name(id));
  }
  return 0;
}

bool OnePassCodec::encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) {
  GT_REQUIRE(g.size() == residual.size(), "{}: input has {} elements but the residual has {}",
             spec(), g.size(), residual.size());
  encode_into(g.data(), residual.data(), g.size(), out);
  return true;
}

}  // namespace detail

namespace {

using detail::dense_body_bytes;
using detail::is_chunked;

class DenseCodec final : public detail::OnePassCodec {
 public:
  DenseCodec(CodecId id, QuantOptions options, OnebitScale onebit_scale = OnebitScale::mean)
      : id_(id), options_(options), onebit_scale_(onebit_scale) {
    GT_ASSERT(id_ == CodecId::onebit || onebit_scale_ == OnebitScale::mean,
              "{}: a onebit scale was given to another codec", codec_name(id_));
    if (is_chunked(id_))
      detail::require_chunk(options_.chunk, codec_name(id_));
    else
      options_.chunk = 0;
    GT_ASSERT(id_ == CodecId::int8 || id_ == CodecId::int4 || options_.step == 0.0f,
              "{}: a quantisation step was given to a codec without integer levels",
              codec_name(id_));
    detail::require_step(options_.step, codec_name(id_));
  }

  CodecId id() const override { return id_; }
  bool lossless() const override { return id_ == CodecId::fp32; }

  std::string spec() const override {
    std::string s = codec_name(id_);
    if (is_chunked(id_)) s += fmt::format(":chunk={}", options_.chunk);
    if (options_.stochastic) s += fmt::format(",stochastic,seed={}", options_.seed);
    if (options_.step > 0.0f) s += fmt::format(",step={}", options_.step);
    if (onebit_scale_ == OnebitScale::rms) s += ",scale=rms";  // mean, the default, is left out
    return s;
  }

  size_t max_payload_bytes(size_t n) const override {
    return kHeaderBytes + dense_body_bytes(id_, n, options_.chunk);
  }

 private:
  void encode_into(const float* g, float* residual, size_t n, Bytes& out) override {
    GT_REQUIRE(n <= kMaxElements, "{}: {} elements exceed the payload limit {}", spec(), n,
               kMaxElements);
    const uint32_t chunk = options_.chunk;
    out.resize(kHeaderBytes + dense_body_bytes(id_, n, chunk));
    std::byte* body = out.data() + kHeaderBytes;
    // The body starts 40 bytes into a heap buffer, so it is 8-byte aligned.
    GT_ASSERT(reinterpret_cast<uintptr_t>(body) % alignof(float) == 0, "misaligned payload body");
    const size_t nc = is_chunked(id_) ? kc::chunk_count(n, chunk) : 0;
    auto* scales = reinterpret_cast<float*>(body);
    std::byte* packed = body + 4 * nc;
    kc::Rounding rounding{options_.stochastic, options_.seed, nonce_};
    switch (id_) {
      case CodecId::fp32:
        kc::cpu::fp32_encode(g, residual, n, reinterpret_cast<float*>(body));
        break;
      case CodecId::fp16:
        kc::cpu::fp16_encode(g, residual, n, reinterpret_cast<uint16_t*>(body));
        break;
      case CodecId::bf16:
        kc::cpu::bf16_encode(g, residual, n, reinterpret_cast<uint16_t*>(body));
        break;
      case CodecId::int8:
        kc::cpu::int8_encode(g, residual, n, chunk, rounding, scales,
                             reinterpret_cast<int8_t*>(packed), options_.step);
        break;
      case CodecId::int4:
        kc::cpu::int4_encode(g, residual, n, chunk, rounding, scales,
                             reinterpret_cast<uint8_t*>(packed), options_.step);
        break;
      case CodecId::fp4:
        kc::cpu::fp4_encode(g, residual, n, chunk, scales, reinterpret_cast<uint8_t*>(packed));
        break;
      case CodecId::onebit:
        kc::cpu::onebit_encode(g, residual, n, chunk, scales, reinterpret_cast<uint32_t*>(packed),
                               onebit_scale_);
        break;
      default:
        GT_ASSERT(false, "not a dense codec");
    }
    if (options_.stochastic) ++nonce_;
    PayloadHeader h;
    h.codec = id_;
    h.chunk = chunk;
    h.flags = options_.stochastic ? kFlagStochastic : 0;
    h.elements = n;
    write_header(h, out);
  }

  CodecId id_;
  QuantOptions options_;
  // onebit only. The payload does not record it: decoding needs only the scales it stores.
  OnebitScale onebit_scale_;
  uint64_t nonce_ = 0;
};

}  // namespace

std::unique_ptr<Codec> make_fp32_codec() {
  return std::make_unique<DenseCodec>(CodecId::fp32, QuantOptions{});
}
std::unique_ptr<Codec> make_fp16_codec() {
  return std::make_unique<DenseCodec>(CodecId::fp16, QuantOptions{});
}
std::unique_ptr<Codec> make_bf16_codec() {
  return std::make_unique<DenseCodec>(CodecId::bf16, QuantOptions{});
}
std::unique_ptr<Codec> make_int8_codec(QuantOptions o) {
  return std::make_unique<DenseCodec>(CodecId::int8, o);
}
std::unique_ptr<Codec> make_int4_codec(QuantOptions o) {
  return std::make_unique<DenseCodec>(CodecId::int4, o);
}
std::unique_ptr<Codec> make_fp4_codec(uint32_t chunk) {
  return std::make_unique<DenseCodec>(CodecId::fp4, QuantOptions{.chunk = chunk});
}
std::unique_ptr<Codec> make_onebit_codec(uint32_t chunk, OnebitScale scale) {
  return std::make_unique<DenseCodec>(CodecId::onebit, QuantOptions{.chunk = chunk}, scale);
}

namespace detail {

void require_chunk(uint32_t chunk, std::string_view what) {
  GT_REQUIRE(chunk >= 32 && chunk <= kMaxChunk && chunk % 32 == 0,
             "{}: chunk {} is invalid: must be a multiple of 32 in [32, {}]", what, chunk,
             kMaxChunk);
}

void require_step(float step, std::string_view what) {
  GT_REQUIRE(step == 0.0f || (std::isfinite(step) && step >= kMinStep && step <= kMaxStep),
             "{}: step {} is invalid: must be in [{}, {}] (a multiple of the chunk's RMS)", what,
             step, kMinStep, kMaxStep);
}

void check_dense(const PayloadHeader& h) {
  const std::string name = codec_name(h.codec);
  if (is_chunked(h.codec))
    require_chunk(h.chunk, "codec payload: " + name);
  else
    GT_REQUIRE(h.chunk == 0, "codec payload: {}: chunk field is {}, must be 0", name, h.chunk);
  GT_REQUIRE(h.aux == 0, "codec payload: {}: aux field is {}, must be 0", name, h.aux);
  const uint64_t expected = dense_body_bytes(h.codec, h.elements, h.chunk);
  GT_REQUIRE(h.body_bytes == expected,
             "codec payload: {}: body is {} bytes, but {} elements in chunks of {} need {}", name,
             h.body_bytes, h.elements, h.chunk, expected);
}

// What decode_checked checks beyond parse_header, before any codec looks at the body.
void check_parsed(const PayloadHeader& h, size_t y_size, std::optional<CodecId> expected) {
  const std::string name = codec_name(static_cast<uint8_t>(h.codec));
  if (expected) {
    GT_REQUIRE(h.codec == *expected, "codec payload: encoded with {}, but this decoder is {}", name,
               codec_name(*expected));
  }
  // powersgd has a second format: a span's pieces in one payload.
  GT_REQUIRE(h.version == 1 || (h.codec == CodecId::powersgd && h.version == 2),
             "codec payload: {}: format version {} is not supported (this build reads 1{})", name,
             h.version, h.codec == CodecId::powersgd ? " and 2" : "");
  GT_REQUIRE(h.elements == y_size, "codec payload: {}: holds {} elements, but the output has {}",
             name, h.elements, y_size);
}

namespace {
void decode_parsed(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  switch (h.codec) {
    case CodecId::fp32:
    case CodecId::fp16:
    case CodecId::bf16:
    case CodecId::int8:
    case CodecId::int4:
    case CodecId::fp4:
    case CodecId::onebit:
      decode_dense(h, body, y, add);
      return;
    case CodecId::topk:
      decode_topk(h, body, y, add);
      return;
    case CodecId::qtopk:
      decode_qtopk(h, body, y, add);
      return;
    case CodecId::zstd:
      decode_zstd(h, body, y, add);
      return;
    case CodecId::powersgd:
      decode_powersgd(h, body, y, add);
      return;
  }
  GT_REQUIRE(false, "codec payload: unknown codec id {}", static_cast<unsigned>(h.codec));
}
}  // namespace

const std::byte* float_aligned(ConstByteSpan body, std::vector<float>& copy) {
  const std::byte* data = body.data();
  // Not for an empty body: memcpy into an empty vector's null data() is undefined (found by
  // fuzz/codec_decode.cpp and fuzz/codec_zstd.cpp under UBSan).
  if (body.empty() || reinterpret_cast<uintptr_t>(data) % alignof(float) == 0) return data;
  copy.resize((body.size() + 3) / 4);
  std::memcpy(copy.data(), data, body.size());
  return reinterpret_cast<const std::byte*>(copy.data());
}

void decode_dense(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  check_dense(h);
  const uint64_t n = h.elements;
  std::vector<float> aligned;
  const std::byte* data = float_aligned(body, aligned);
  const size_t nc = is_chunked(h.codec) ? kc::chunk_count(n, h.chunk) : 0;
  const auto* scales = reinterpret_cast<const float*>(data);
  const std::byte* packed = data + 4 * nc;
  float* out = y.data();
  switch (h.codec) {
    case CodecId::fp32:
      kc::cpu::fp32_decode(reinterpret_cast<const float*>(data), n, out, add);
      break;
    case CodecId::fp16:
      kc::cpu::fp16_decode(reinterpret_cast<const uint16_t*>(data), n, out, add);
      break;
    case CodecId::bf16:
      kc::cpu::bf16_decode(reinterpret_cast<const uint16_t*>(data), n, out, add);
      break;
    case CodecId::int8:
      kc::cpu::int8_decode(scales, reinterpret_cast<const int8_t*>(packed), n, h.chunk, out, add);
      break;
    case CodecId::int4:
      kc::cpu::int4_decode(scales, reinterpret_cast<const uint8_t*>(packed), n, h.chunk, out, add);
      break;
    case CodecId::fp4:
      kc::cpu::fp4_decode(scales, reinterpret_cast<const uint8_t*>(packed), n, h.chunk, out, add);
      break;
    case CodecId::onebit:
      kc::cpu::onebit_decode(scales, reinterpret_cast<const uint32_t*>(packed), n, h.chunk, out,
                             add);
      break;
    default:
      GT_ASSERT(false, "not a dense codec");
  }
}

void decode_checked(ConstByteSpan payload, FloatSpan y, bool add, std::optional<CodecId> expected) {
  const PayloadHeader h = parse_header(payload);
  check_parsed(h, y.size(), expected);
  decode_parsed(h, payload_body(payload), y, add);
}

}  // namespace detail

void decode_payload(ConstByteSpan payload, FloatSpan y) {
  detail::decode_checked(payload, y, false, {});
}
void decode_add_payload(ConstByteSpan payload, FloatSpan y) {
  detail::decode_checked(payload, y, true, {});
}
uint64_t payload_elements(ConstByteSpan payload) { return parse_header(payload).elements; }

void Codec::restore_stream_state(uint64_t stream, MatrixShape shape, ConstFloatSpan values) {
  (void)shape;
  GT_REQUIRE(values.empty(), "{}: keeps no state per stream, but stream {} was given {} values",
             spec(), stream, values.size());
}

ConstFloatSpan decode_view(const PayloadHeader& h, ConstByteSpan payload, FloatSpan scratch) {
  // A cheap guard against a header of another payload; the checksum itself is not recomputed.
  GT_ASSERT(payload.size() >= kHeaderBytes && h.body_bytes == payload.size() - kHeaderBytes &&
                std::memcmp(&h.checksum, payload.data() + 32, sizeof h.checksum) == 0,
            "decode_view: the header given is not this payload's");
  detail::check_parsed(h, scratch.size(), {});
  const ConstByteSpan body = payload_body(payload);
  if (h.codec == CodecId::fp32 && reinterpret_cast<uintptr_t>(body.data()) % alignof(float) == 0) {
    detail::check_dense(h);
    // The body is the values, little-endian fp32 like this machine (payload.cpp asserts it).
    return {reinterpret_cast<const float*>(body.data()), scratch.size()};
  }
  detail::decode_parsed(h, body, scratch, false);
  return scratch;
}

}  // namespace geotrain::compression
