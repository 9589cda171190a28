// Fuzz target: wire::decode_header, the decoder of every wire message (frame 0 of each ZeroMQ
// message: Hello, Push, PullReply, Error, KvSet, ...; the seed corpus holds one of each).
//
// Input: the bytes of frame 0. Contract checked: decode_header throws only WireError; a header it
// accepts re-encodes (when the result fits in a frame) to bytes that decode to the same message
// (same type, request id, and the same bytes when encoded again); for Push and PullReply,
// check_frames accepts payload frames of exactly the sizes the segments state and refuses one
// frame too few.
#include <optional>
#include <vector>

#include "fuzz/fuzz_target.hpp"
#include "wire/messages.hpp"

namespace {

using namespace geotrain;

bool same_bytes(const wire::Frame& a, const wire::Frame& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

template <typename M>
void check_payload_frames(const M& m, uint64_t request_id) {
  // Frames of the stated sizes, as far as that is cheap (a header may claim huge frames).
  constexpr uint64_t kMaxFrameBytes = 1 << 12;
  if (m.segments.empty() || m.segments.size() > 64) return;
  std::vector<wire::Frame> frames;
  bool all_small = true;
  for (const auto& s : m.segments) {
    all_small = all_small && s.bytes <= kMaxFrameBytes;
    frames.emplace_back(std::min(s.bytes, kMaxFrameBytes));
  }
  if (all_small) wire::check_frames(m.segments, frames, request_id);
  frames.pop_back();
  bool refused = false;
  try {
    wire::check_frames(m.segments, frames, request_id);
  } catch (const wire::WireError&) {
    refused = true;
  }
  GT_FUZZ_CHECK(refused, "check_frames accepted one payload frame too few");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const wire::Frame frame(data, size);
  std::optional<wire::Header> header;
  try {
    header = wire::decode_header(frame);
  } catch (const wire::WireError& e) {
    (void)wire::error_code_name(e.code());
    return 0;
  }
  (void)wire::body_name(header->body);

  const wire::Frame encoded = wire::encode_header(*header);
  // A list of empty structs costs capnp's traversal limit one word per element but re-encodes
  // to full elements, so a small frame can decode to a message larger than any frame we accept
  // (bounded by kMaxHeaderWords elements; found by this target). Only the rest round-trips.
  if (encoded.size() > wire::kMaxHeaderWords * sizeof(uint64_t)) return 0;
  const wire::Header again = wire::decode_header(encoded);
  GT_FUZZ_CHECK(again.request_id == header->request_id, "request id changed in a round trip");
  GT_FUZZ_CHECK(again.body.index() == header->body.index(), "message type changed in a round trip");
  GT_FUZZ_CHECK(same_bytes(wire::encode_header(again), encoded),
                "a decoded header does not re-encode to the same bytes");

  if (const auto* push = std::get_if<wire::Push>(&header->body))
    check_payload_frames(*push, header->request_id);
  if (const auto* pull = std::get_if<wire::PullReply>(&header->body))
    check_payload_frames(*pull, header->request_id);
  return 0;
}
