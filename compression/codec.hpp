// Codec: lossy or lossless compression of an fp32 span into a self-describing payload
// (compression/payload.hpp), and back.
//
// Ownership and threads: a Codec owns only its parameters and a counter for stochastic
// rounding; encode() advances that counter, so one Codec object is used by one thread at a time.
// decode() and decode_add() are const and may run concurrently. Nothing blocks. Output buffers
// are the caller's; encode() resizes `out` to the exact payload size.
//
// Decoding validates the whole payload (header, lengths, checksum, codec fields) before it
// touches the output: on any error it throws InputError naming the problem and `y` is unchanged.
//
// Error feedback is a decorator (compression/error_feedback.hpp). A codec may offer a fused
// fast path for it, encode_with_feedback(), which must produce exactly the bytes and residual
// of the reference order implemented there.
//
// Shapes: a span is flat to every codec but one. powersgd factorises a matrix, so a caller that
// knows the span is a row-major matrix (a leader's per-tensor segment) says so through
// encode_matrix(); powersgd also keeps state per error-feedback stream across encodes (its
// warm-started Q), which stream_states() exposes for snapshots. The other codecs ignore both.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compression/payload.hpp"
#include "core/span.hpp"

namespace geotrain::compression {

// A span seen as a row-major matrix of rows x cols; cols 0: not a matrix (or not known).
struct MatrixShape {
  uint64_t rows = 0;
  uint64_t cols = 0;
  bool matrix() const { return cols != 0; }
};

// A span laid out as consecutive pieces (a server's shard: its tensors' pieces, each a matrix
// or not), `count` elements each.
struct SpanPiece {
  uint64_t count = 0;
  MatrixShape shape;  // a matrix when shape.matrix() (rows x cols == count)
};

class Codec {
 public:
  virtual ~Codec() = default;
  Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  virtual CodecId id() const = 0;
  // Canonical spec, accepted by make_codec (e.g. "int4:chunk=256,stochastic,seed=7").
  virtual std::string spec() const = 0;
  virtual bool lossless() const = 0;
  // Upper bound on the payload size for n elements.
  virtual size_t max_payload_bytes(size_t n) const = 0;

  // out = payload encoding x.
  virtual void encode(ConstFloatSpan x, Bytes& out) = 0;

  // Fused error feedback: x = g + residual; out = C(x); residual = x - D(out), in one pass.
  // Returns false (and does nothing) when this codec has no fused path.
  virtual bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) {
    (void)g, (void)residual, (void)out;
    return false;
  }

  // Whether encode_matrix differs from encode (ErrorFeedback then takes the reference order with
  // encode_matrix for spans with a shape).
  virtual bool uses_shape() const { return false; }
  // out = payload encoding x, a `shape` matrix (shape.rows * shape.cols == x.size()), for the
  // error-feedback stream `stream`, whose state (powersgd's Q) it may read and update.
  virtual void encode_matrix(ConstFloatSpan x, MatrixShape shape, uint64_t stream, Bytes& out) {
    (void)shape, (void)stream;
    encode(x, out);
  }
  // out = payload encoding x, laid out as `pieces` (their counts sum to x.size()), for `stream`:
  // powersgd factorises each matrix piece and sends the rest through its fallback, in one
  // payload. Default: encode(x, out).
  virtual void encode_pieces(ConstFloatSpan x, std::span<const SpanPiece> pieces, uint64_t stream,
                             Bytes& out) {
    (void)pieces, (void)stream;
    encode(x, out);
  }
  // Forgets a stream's state (a region that pulled full values starts its downlink again).
  virtual void reset_stream(uint64_t stream) { (void)stream; }
  // The state kept per stream across encodes (empty for codecs that keep none), and its restore
  // from a snapshot: InputError naming the stream when `values` cannot be that stream's state
  // for a `shape` matrix (nothing changes then).
  virtual std::map<uint64_t, std::vector<float>> stream_states() const { return {}; }
  virtual void restore_stream_state(uint64_t stream, MatrixShape shape, ConstFloatSpan values);

  // y = D(payload). y.size() must equal the payload's element count.
  virtual void decode(ConstByteSpan payload, FloatSpan y) const = 0;
  // y += D(payload).
  virtual void decode_add(ConstByteSpan payload, FloatSpan y) const = 0;
};

// Decodes any payload by the codec id in its header (the receiving side of the wire does not
// need to know the sender's settings). Same validation and guarantees as Codec::decode.
void decode_payload(ConstByteSpan payload, FloatSpan y);
void decode_add_payload(ConstByteSpan payload, FloatSpan y);

// decode_payload for a payload that parse_header already validated (`parsed` is what it
// returned), without hashing it again and without a copy where none is needed: an fp32 payload
// whose body is aligned for float is returned as a view of its own bytes (valid while `payload`
// is); any other payload is decoded into `scratch`, which is returned. Otherwise the same
// validation and errors as decode_payload, with scratch.size() as the expected element count;
// nothing is written to scratch on error.
ConstFloatSpan decode_view(const PayloadHeader& parsed, ConstByteSpan payload, FloatSpan scratch);

// Element count a payload claims, after validating its header.
uint64_t payload_elements(ConstByteSpan payload);

}  // namespace geotrain::compression
