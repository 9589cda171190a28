// powersgd: a matrix as the rank-r factors of one power iteration (kernels/powersgd_cpu.hpp).
//
// Body: P (rows x r fp32, row-major, orthonormal columns), then Q (cols x r fp32). Header: chunk
// = cols, aux = r, elements = rows x cols; the decoder checks r <= min(rows, cols) and the exact
// body size before it writes anything. A span without a matrix shape (a bias, a norm's gain, a
// segment that is not whole rows of one tensor, a server's downlink) is encoded by the fallback
// codec, whose own payload then travels: the receiver decodes either by its header.
//
// State: each error-feedback stream's last Q (cols x r), the start of its next power iteration
// (the warm start that makes one iteration a round enough: over rounds it follows the residual-
// corrected deltas' dominant subspace). A stream's first Q, and any column of Q that came back
// zero (a zero delta, or a column dependent on the others), is drawn from N(0, 1) by (seed,
// stream, column), so two runs with the same seed encode the same bytes.
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "core/error.hpp"
#include "core/splitmix64.hpp"
#include "kernels/powersgd_cpu.hpp"

namespace geotrain::compression {
namespace pk = geotrain::kernels::cpu;
namespace {

// Q's column k of `stream` as drawn at its start: normal values by Box-Muller from splitmix64.
void draw_column(std::vector<float>& q, size_t cols, size_t r, size_t k, uint64_t seed,
                 uint64_t stream) {
  uint64_t state = mix64(seed ^ mix64(stream + 0x51ed2701u) ^ mix64(k + 1));
  for (size_t j = 0; j < cols; ++j) {
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 0.5) * 0x1p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1p-53;
    q[j * r + k] =
        static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
}

bool column_is_zero(const std::vector<float>& q, size_t cols, size_t r, size_t k) {
  for (size_t j = 0; j < cols; ++j)
    if (q[j * r + k] != 0.0f) return false;
  return true;
}

uint64_t body_bytes(uint64_t rows, uint64_t cols, uint64_t r) { return 4 * r * (rows + cols); }

std::unique_ptr<Codec> make_fallback(CodecId id) {
  switch (id) {
    case CodecId::fp32:
      return make_fp32_codec();
    case CodecId::fp16:
      return make_fp16_codec();
    case CodecId::bf16:
      return make_bf16_codec();
    case CodecId::int8:
      return make_int8_codec();
    case CodecId::int4:
      return make_int4_codec();
    case CodecId::fp4:
      return make_fp4_codec();
    case CodecId::onebit:
      return make_onebit_codec();
    default:
      break;
  }
  throw InputError(fmt::format(
      "powersgd: fallback {} is invalid (allowed: fp32, fp16, bf16, int8, int4, fp4, onebit)",
      codec_name(id)));
}

class PowerSgdCodec final : public Codec {
 public:
  explicit PowerSgdCodec(PowerSgdOptions options)
      : options_(options), fallback_(make_fallback(options.fallback)) {
    GT_REQUIRE(options_.rank >= 1 && options_.rank <= kMaxPowerSgdRank,
               "powersgd: rank {} is invalid: must be in [1, {}]", options_.rank, kMaxPowerSgdRank);
  }

  CodecId id() const override { return CodecId::powersgd; }
  bool lossless() const override { return false; }
  std::string spec() const override {
    std::string s =
        fmt::format("powersgd:rank={},fallback={}", options_.rank, codec_name(options_.fallback));
    if (options_.seed != 0) s += fmt::format(",seed={}", options_.seed);
    return s;
  }
  // A matrix of n elements has rows + cols <= n + 1.
  size_t max_payload_bytes(size_t n) const override {
    return std::max<size_t>(fallback_->max_payload_bytes(n),
                            kHeaderBytes + body_bytes(n, 1, options_.rank));
  }

  // Without a shape: the fallback codec.
  void encode(ConstFloatSpan x, Bytes& out) override { fallback_->encode(x, out); }
  bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) override {
    return fallback_->encode_with_feedback(g, residual, out);
  }

  bool uses_shape() const override { return true; }
  void encode_matrix(ConstFloatSpan x, MatrixShape shape, uint64_t stream, Bytes& out) override {
    if (!shape.matrix()) return encode(x, out);
    GT_REQUIRE(shape.rows * shape.cols == x.size() && shape.cols <= 0xffffffffu,
               "powersgd: a {} x {} matrix given {} elements", shape.rows, shape.cols, x.size());
    GT_REQUIRE(x.size() <= kMaxElements, "powersgd: {} elements exceed the payload limit {}",
               x.size(), kMaxElements);
    const size_t rows = shape.rows, cols = shape.cols;
    const size_t r = std::min<size_t>({options_.rank, rows, cols});
    std::vector<float>& q = warm_q(stream, cols, r);
    out.resize(kHeaderBytes + body_bytes(rows, cols, r));
    // The body starts 40 bytes into a heap buffer: aligned for float.
    auto* p = reinterpret_cast<float*>(out.data() + kHeaderBytes);
    float* q_out = p + rows * r;
    pk::powersgd_left(x.data(), q.data(), rows, cols, r, p);
    pk::powersgd_orthonormalise(p, rows, r);
    pk::powersgd_right(x.data(), p, rows, cols, r, q_out);
    std::memcpy(q.data(), q_out, 4 * cols * r);
    PayloadHeader h;
    h.codec = CodecId::powersgd;
    h.chunk = static_cast<uint32_t>(cols);
    h.aux = static_cast<uint32_t>(r);
    h.elements = x.size();
    write_header(h, out);
  }

  std::map<uint64_t, std::vector<float>> stream_states() const override { return q_; }
  void restore_stream_state(uint64_t stream, MatrixShape shape, ConstFloatSpan values) override {
    const uint64_t r = std::min<uint64_t>({options_.rank, shape.rows, shape.cols});
    GT_REQUIRE(shape.matrix() && values.size() == shape.cols * r,
               "powersgd: the state of stream {} has {} values; a {} x {} matrix at rank {} "
               "keeps {}",
               stream, values.size(), shape.rows, shape.cols, options_.rank, shape.cols * r);
    q_[stream].assign(values.begin(), values.end());
  }

  void decode(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, false, {});
  }
  void decode_add(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, true, {});
  }

 private:
  // The stream's Q for a matrix of `cols` columns at rank r: its last one, or drawn when it has
  // none (or one of another size: the shape changed); zero columns drawn again.
  std::vector<float>& warm_q(uint64_t stream, size_t cols, size_t r) {
    std::vector<float>& q = q_[stream];
    const bool fresh = q.size() != cols * r;
    if (fresh) q.assign(cols * r, 0.0f);
    for (size_t k = 0; k < r; ++k)
      if (fresh || column_is_zero(q, cols, r, k)) draw_column(q, cols, r, k, options_.seed, stream);
    return q;
  }

  PowerSgdOptions options_;
  std::unique_ptr<Codec> fallback_;
  std::map<uint64_t, std::vector<float>> q_;
};

}  // namespace

std::unique_ptr<Codec> make_powersgd_codec(PowerSgdOptions options) {
  return std::make_unique<PowerSgdCodec>(options);
}

namespace detail {

void decode_powersgd(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  const uint64_t cols = h.chunk, r = h.aux;
  GT_REQUIRE(cols >= 1 && h.elements % cols == 0,
             "codec payload: powersgd: {} elements are not a matrix of {} columns", h.elements,
             cols);
  const uint64_t rows = h.elements / cols;
  GT_REQUIRE(r >= 1 && r <= kMaxPowerSgdRank && r <= rows && r <= cols,
             "codec payload: powersgd: rank {} is invalid for a {} x {} matrix (at most {} and "
             "the smaller side)",
             r, rows, cols, kMaxPowerSgdRank);
  const uint64_t expected = body_bytes(rows, cols, r);
  GT_REQUIRE(h.body_bytes == expected,
             "codec payload: powersgd: body is {} bytes, but a {} x {} matrix at rank {} needs {}",
             h.body_bytes, rows, cols, r, expected);
  std::vector<float> aligned;
  const auto* p = reinterpret_cast<const float*>(float_aligned(body, aligned));
  pk::powersgd_expand(p, p + rows * r, rows, cols, r, y.data(), add);
}

}  // namespace detail
}  // namespace geotrain::compression
