// PushPayload: a push's delta, read from its payload frames and checked, for the server loop.
// A push carries segments of its shard ({offset, count, codec}, in order, not overlapping), each
// a payload (compression/payload.hpp: header, checksum, body) in its own frame. Everything about
// them is checked against the push's header and the shard's size before any of it is used; a
// failed check throws WireError naming the segment (`bad_codec`, `bad_range`, `bad_payload`,
// `too_large`), and nothing has changed.
//
// The usual push is one fp32 segment covering the shard: it is read in place (no copy), and the
// caller may start computing from it while finite() hashes and scans it block by block. Any other
// push is decoded into a scratch buffer (owned here, reused), several segments side by side with
// zeros between and around them (only the gaps are zero-filled).
//
// Single-threaded: one per server loop.
#pragma once

#include <cstdint>
#include <span>

#include "core/span.hpp"
#include "server/huge_pages.hpp"
#include "wire/frame.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {

inline constexpr size_t kMaxSegments = 4096;
// push.tokens above this is refused, so that the tokens of the deltas merged into a round sum
// without overflow.
inline constexpr uint64_t kMaxPushTokens = uint64_t{1} << 40;

class PushPayload {
 public:
  // The delta of a push to a shard of `n` elements.
  struct Delta {
    ConstFloatSpan values;
    bool in_place = false;  // the payload frame's own floats (valid while the frame is)
  };

  // The segments' count, codecs and ranges against a shard of `n` elements, the frames against the
  // segments, and push.tokens.
  static void check(const wire::Push& m, std::span<const wire::Frame> payloads, uint64_t n,
                    uint64_t request_id);
  // The delta (after check()): in place, or every segment's payload checked and decoded.
  Delta read(const wire::Push& m, std::span<const wire::Frame> payloads, uint64_t n,
             uint64_t request_id);
  // Whether every value is finite; for an in-place delta this also checks the payload's header
  // and checksum, which read() left for here.
  static bool finite(const Delta& d, std::span<const wire::Frame> payloads, uint64_t request_id);

 private:
  ConstFloatSpan decode(const wire::Push& m, std::span<const wire::Frame> payloads, uint64_t n,
                        uint64_t request_id);

  ShardBuffer scratch_;
};

}  // namespace geotrain::server
