// ErrorFeedback: the decorator that makes any lossy codec converge like its uncompressed
// counterpart (Seide et al. 2014; Karimireddy et al. 2019, "EF-SGD"). It owns one residual per
// stream (a shard, a tensor class, or, on the server, a region's downlink) and is the one place
// where the order lives:
//
//     x = g + beta e;   c = C(x);   e = x - D(c)
//
// beta is the decay (SparseLoCo's e <- beta e + delta before compressing): 1, the default, keeps
// the whole residual and is the classic form, computed exactly as it always was (no multiply);
// beta < 1 forgets old compression error geometrically. The residual stored (and checkpointed)
// is e, before any decay.
//
// When the codec offers a fused path (Codec::encode_with_feedback) it is used; it computes the
// same bytes and residual in one pass, and tests hold the two paths equal.
//
// Threads: one ErrorFeedback is used by one thread at a time. Buffers: residuals are owned here;
// `out` is the caller's and is resized to the payload.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "compression/codec.hpp"

namespace geotrain::compression {

// InputError naming `what` and the value unless 0 < decay <= 1.
void require_feedback_decay(double decay, std::string_view what);

struct FeedbackOptions {
  float decay = 1.0f;     // beta, in (0, 1]
  bool use_fused = true;  // false forces the reference path (for tests and benchmarks)
};

class ErrorFeedback {
 public:
  // InputError if options.decay is outside (0, 1].
  explicit ErrorFeedback(std::unique_ptr<Codec> codec, FeedbackOptions options = {});
  ErrorFeedback(std::unique_ptr<Codec> codec, bool use_fused)
      : ErrorFeedback(std::move(codec), FeedbackOptions{1.0f, use_fused}) {}

  // Encodes g for `stream`, carrying that stream's residual. The first call for a stream fixes
  // its length; later calls must pass the same length (InputError otherwise, residual kept).
  // A `shape` says g is a matrix: a codec that uses shapes (powersgd) encodes x = g + beta e
  // through Codec::encode_matrix, in the reference order.
  void encode(uint64_t stream, ConstFloatSpan g, Bytes& out, MatrixShape shape = {});
  // The same for g laid out as `pieces` (Codec::encode_pieces), in the reference order when the
  // codec uses shapes; otherwise encode(stream, g, out).
  void encode(uint64_t stream, ConstFloatSpan g, Bytes& out, std::span<const SpanPiece> pieces);

  // Encodes with `codec` from now on (a codec schedule's switch); every stream keeps its
  // residual: e is in parameter units, x - D(c) whichever codec made c, so the new codec sends
  // what the old one still owed. Returns the codec replaced.
  std::unique_ptr<Codec> set_codec(std::unique_ptr<Codec> codec);
  // Moves `stream`'s residual to `to` (which uses another codec: the server keeps one
  // ErrorFeedback per downlink codec), replacing any there; with none here, `to` has none after.
  void move_residual(uint64_t stream, ErrorFeedback& to);

  float decay() const { return options_.decay; }
  const Codec& codec() const { return *codec_; }
  Codec& codec() { return *codec_; }

  // The residual of a stream; empty when the stream has not been encoded yet.
  ConstFloatSpan residual(uint64_t stream) const;
  // Replaces a stream's residual (restoring from a checkpoint).
  void set_residual(uint64_t stream, ConstFloatSpan values);
  // Forgets a stream's residual and its codec's state (e.g. a region that rejoined and pulled
  // full values).
  void reset(uint64_t stream);
  std::vector<uint64_t> streams() const;

 private:
  std::vector<float>& residual_for(uint64_t stream, size_t n);
  // The reference order, with `encode_x` writing c = C(x) for x = g + beta e.
  template <typename EncodeX>
  void encode_reference(std::vector<float>& e, const std::vector<float>& r, ConstFloatSpan g,
                        Bytes& out, EncodeX&& encode_x);
  // e itself when beta = 1; else beta e, in scratch (e stays as it is until the encode succeeds).
  std::vector<float>& decayed(std::vector<float>& e);

  std::unique_ptr<Codec> codec_;
  FeedbackOptions options_;
  std::map<uint64_t, std::vector<float>> residuals_;
  std::vector<float> decayed_;  // scratch: beta e (beta < 1 only)
  std::vector<float> x_;        // scratch: g + beta e
  std::vector<float> decoded_;  // scratch: D(c)
};

}  // namespace geotrain::compression
