// ErrorFeedback: the decorator that makes any lossy codec converge like its uncompressed
// counterpart (Seide et al. 2014; Karimireddy et al. 2019, "EF-SGD"). It owns one residual per
// stream (a shard, a tensor class, or, on the server, a region's downlink) and is the one place
// where the order lives:
//
//     x = g + e;   c = C(x);   e = x - D(c)
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
#include <vector>

#include "compression/codec.hpp"

namespace geotrain::compression {

class ErrorFeedback {
 public:
  // use_fused = false forces the reference path (for tests and benchmarks).
  explicit ErrorFeedback(std::unique_ptr<Codec> codec, bool use_fused = true);

  // Encodes g for `stream`, carrying that stream's residual. The first call for a stream fixes
  // its length; later calls must pass the same length (InputError otherwise, residual kept).
  void encode(uint64_t stream, ConstFloatSpan g, Bytes& out);

  const Codec& codec() const { return *codec_; }
  Codec& codec() { return *codec_; }

  // The residual of a stream; empty when the stream has not been encoded yet.
  ConstFloatSpan residual(uint64_t stream) const;
  // Replaces a stream's residual (restoring from a checkpoint).
  void set_residual(uint64_t stream, ConstFloatSpan values);
  // Forgets a stream's residual (e.g. a region that rejoined and pulled full values).
  void reset(uint64_t stream);
  std::vector<uint64_t> streams() const;

 private:
  std::vector<float>& residual_for(uint64_t stream, size_t n);

  std::unique_ptr<Codec> codec_;
  bool use_fused_;
  std::map<uint64_t, std::vector<float>> residuals_;
  std::vector<float> x_;        // scratch: g + e
  std::vector<float> decoded_;  // scratch: D(c)
};

}  // namespace geotrain::compression
