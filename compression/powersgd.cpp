// powersgd: a matrix as the rank-r factors of one power iteration (kernels/powersgd_cpu.hpp).
//
// Body: P (rows x r fp32, row-major, orthonormal columns), then Q (cols x r fp32). Header: chunk
// = cols, aux = r, elements = rows x cols; the decoder checks r <= min(rows, cols) and the exact
// body size before it writes anything. A span without a matrix shape (a bias, a norm's gain, a
// segment that is not whole rows of one tensor, a server's downlink) is encoded by the fallback
// codec, whose own payload then travels: the receiver decodes either by its header.
//
// A span laid out as pieces (encode_pieces: a server's shard, its tensors' pieces) is one payload
// of format version 2: header chunk 0, aux 0; body: u32 piece count, u32 0, then per piece u64
// elements and u64 payload bytes, then the pieces' own payloads in order (a matrix's version-1
// payload, or the fallback's). The decoder checks the table and every nested header before it
// writes anything.
//
// State: each error-feedback stream's last Q (cols x r), the start of its next power iteration
// (the warm start that makes one iteration a round enough: over rounds it follows the residual-
// corrected deltas' dominant subspace). A stream's first Q, and any column of Q that came back
// zero (a zero delta, or a column dependent on the others), is drawn from N(0, 1) by (seed,
// stream, column), so two runs with the same seed encode the same bytes; a piece's (encode_pieces)
// by (seed, piece, column), the same for every stream.
#include <cmath>
#include <cstring>
#include <numbers>
#include <span>
#include <utility>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "compression/factory.hpp"
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

// Version 2: pieces in one payload.
constexpr uint8_t kPiecesVersion = 2;
constexpr uint32_t kMaxPieces = kMaxPowerSgdPieces;
constexpr size_t kPieceEntryBytes = 16;  // u64 elements, u64 payload bytes

// The fallback: a dense codec with its default options.
std::unique_ptr<Codec> make_fallback(CodecId id) {
  GT_REQUIRE(
      detail::is_dense(id),
      "powersgd: fallback {} is invalid (allowed: fp32, fp16, bf16, int8, int4, fp4, onebit)",
      codec_name(id));
  CodecSettings settings;
  settings.id = id;
  return make_codec(settings);
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
  size_t max_payload_bytes(size_t n) const override { return powersgd_max_payload_bytes(n); }

  // Without a shape: the fallback codec.
  void encode(ConstFloatSpan x, Bytes& out) override { fallback_->encode(x, out); }
  bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) override {
    return fallback_->encode_with_feedback(g, residual, out);
  }

  bool uses_shape() const override { return true; }
  void encode_matrix(ConstFloatSpan x, MatrixShape shape, uint64_t stream, Bytes& out) override {
    if (!shape.matrix()) return encode(x, out);
    factorise(x, shape, q_[stream], stream, out);
  }

  void encode_pieces(ConstFloatSpan x, std::span<const SpanPiece> pieces, uint64_t stream,
                     Bytes& out) override {
    GT_REQUIRE(!pieces.empty() && pieces.size() <= kMaxPieces,
               "powersgd: {} pieces (allowed: 1 to {})", pieces.size(), kMaxPieces);
    std::vector<Bytes> parts(pieces.size());
    uint64_t at = 0, bytes = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const SpanPiece& piece = pieces[k];
      GT_REQUIRE(piece.count <= x.size() - at, "powersgd: the pieces hold more than {} elements",
                 x.size());
      const ConstFloatSpan part = x.subspan(at, piece.count);
      if (piece.shape.matrix())
        // The first Q by the piece alone: streams (a server's regions) given the same
        // changes send the same bytes, so their views of the model stay equal.
        factorise(part, piece.shape, piece_q_[{stream, k}], k, parts[k]);
      else
        fallback_->encode(part, parts[k]);
      at += piece.count;
      bytes += parts[k].size();
    }
    GT_REQUIRE(at == x.size(), "powersgd: the pieces hold {} elements, the span {}", at, x.size());
    const size_t table = 8 + kPieceEntryBytes * pieces.size();
    out.resize(kHeaderBytes + table + bytes);
    std::byte* body = out.data() + kHeaderBytes;
    const uint32_t count = static_cast<uint32_t>(pieces.size()), zero = 0;
    std::memcpy(body, &count, 4);
    std::memcpy(body + 4, &zero, 4);
    std::byte* next = body + table;
    for (size_t k = 0; k < parts.size(); ++k) {
      const uint64_t entry[2] = {pieces[k].count, parts[k].size()};
      std::memcpy(body + 8 + kPieceEntryBytes * k, entry, sizeof entry);
      std::memcpy(next, parts[k].data(), parts[k].size());
      next += parts[k].size();
    }
    PayloadHeader h;
    h.codec = CodecId::powersgd;
    h.version = kPiecesVersion;
    h.elements = x.size();
    write_header(h, out);
  }

  void reset_stream(uint64_t stream) override {
    q_.erase(stream);
    std::erase_if(piece_q_, [&](const auto& kv) { return kv.first.first == stream; });
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
  // out = the version-1 payload of x, a `shape` matrix, from `q` (the stream's last Q, updated);
  // `key` draws a Q's columns where there is none.
  void factorise(ConstFloatSpan x, MatrixShape shape, std::vector<float>& q, uint64_t key,
                 Bytes& out) {
    GT_REQUIRE(shape.rows * shape.cols == x.size() && shape.cols <= 0xffffffffu,
               "powersgd: a {} x {} matrix given {} elements", shape.rows, shape.cols, x.size());
    GT_REQUIRE(x.size() <= kMaxElements, "powersgd: {} elements exceed the payload limit {}",
               x.size(), kMaxElements);
    const size_t rows = shape.rows, cols = shape.cols;
    const size_t r = std::min<size_t>({options_.rank, rows, cols});
    warm_q(q, cols, r, key);
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

  // q as a start for a matrix of `cols` columns at rank r: as it is, or drawn when it is empty
  // (or of another size: the shape changed); zero columns drawn again.
  void warm_q(std::vector<float>& q, size_t cols, size_t r, uint64_t key) const {
    const bool fresh = q.size() != cols * r;
    if (fresh) q.assign(cols * r, 0.0f);
    for (size_t k = 0; k < r; ++k)
      if (fresh || column_is_zero(q, cols, r, k)) draw_column(q, cols, r, k, options_.seed, key);
  }

  PowerSgdOptions options_;
  std::unique_ptr<Codec> fallback_;
  std::map<uint64_t, std::vector<float>> q_;  // per stream: encode_matrix's Q
  // per (stream, piece): encode_pieces' Q (not in stream_states: servers keep no downlink state
  // across a restart, their regions pull in full)
  std::map<std::pair<uint64_t, size_t>, std::vector<float>> piece_q_;
};

}  // namespace

std::unique_ptr<Codec> make_powersgd_codec(PowerSgdOptions options) {
  return std::make_unique<PowerSgdCodec>(options);
}

namespace detail {

namespace {

// Version 2: checks the piece table and every piece's header, decodes each piece into a copy,
// and only then writes y.
void decode_pieces(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  GT_REQUIRE(h.chunk == 0 && h.aux == 0,
             "codec payload: powersgd pieces: chunk {} and aux {}, must be 0", h.chunk, h.aux);
  GT_REQUIRE(body.size() >= 8, "codec payload: powersgd pieces: body of {} bytes has no table",
             body.size());
  uint32_t count = 0, zero = 0;
  std::memcpy(&count, body.data(), 4);
  std::memcpy(&zero, body.data() + 4, 4);
  GT_REQUIRE(count >= 1 && count <= kMaxPieces && zero == 0,
             "codec payload: powersgd pieces: {} pieces (allowed: 1 to {})", count, kMaxPieces);
  const uint64_t table = 8 + kPieceEntryBytes * uint64_t{count};
  GT_REQUIRE(body.size() >= table,
             "codec payload: powersgd pieces: body of {} bytes is shorter than its table of {} "
             "pieces",
             body.size(), count);
  std::vector<float> decoded(y.size());
  uint64_t at = 0, from = table;
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t entry[2];
    std::memcpy(entry, body.data() + 8 + kPieceEntryBytes * k, sizeof entry);
    const uint64_t elements = entry[0], bytes = entry[1];
    GT_REQUIRE(elements <= y.size() - at && bytes <= body.size() - from,
               "codec payload: powersgd pieces: piece {} ({} elements, {} bytes) runs past the "
               "payload",
               k, elements, bytes);
    const ConstByteSpan part = body.subspan(from, bytes);
    const PayloadHeader ph = parse_header(part);
    GT_REQUIRE(is_dense(ph.codec) || (ph.codec == CodecId::powersgd && ph.version == 1),
               "codec payload: powersgd pieces: piece {} is {}, not a matrix's factors or a "
               "dense codec",
               k, codec_name(static_cast<uint8_t>(ph.codec)));
    decode_checked(part, FloatSpan(decoded).subspan(at, elements), false, std::nullopt);
    at += elements;
    from += bytes;
  }
  GT_REQUIRE(at == y.size() && from == body.size(),
             "codec payload: powersgd pieces: {} elements in {} bytes, the payload holds {} in {}",
             at, from, y.size(), body.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = add ? y[i] + decoded[i] : decoded[i];
}

}  // namespace

void decode_powersgd(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  if (h.version == kPiecesVersion) return decode_pieces(h, body, y, add);
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
