#include "server/push_payload.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "compression/codec.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "server/shard_kernels.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {
// The payload header of push segment i, checked (checksum included, `visit` seeing each block of
// the body as it is hashed) and held against what the push's header says of the segment.
compression::PayloadHeader checked_segment(size_t i, const wire::Segment& s, ConstByteSpan bytes,
                                           uint64_t request_id,
                                           const compression::BodyVisit& visit) {
  compression::PayloadHeader header;
  try {
    header = compression::parse_header(bytes, visit);
  } catch (const InputError& e) {
    throw WireError(ErrorCode::bad_payload, fmt::format("segment {}: {}", i, e.what()), request_id);
  }
  if (static_cast<uint8_t>(header.codec) != s.codec)
    throw WireError(
        ErrorCode::bad_codec,
        fmt::format("segment {}: header says codec {}, payload is {}", i,
                    compression::codec_name(s.codec), compression::codec_name(header.codec)),
        request_id);
  if (header.elements != s.count)
    throw WireError(ErrorCode::bad_payload,
                    fmt::format("segment {}: header says {} elements, payload has {}", i, s.count,
                                header.elements),
                    request_id);
  return header;
}

// The floats of a push that is one fp32 segment covering the shard, where they can be read in
// place; empty otherwise.
std::optional<ConstFloatSpan> fp32_in_place(const wire::Push& m,
                                            std::span<const zmq::message_t> payloads, uint64_t n) {
  const auto fp32 = static_cast<uint8_t>(compression::CodecId::fp32);
  if (m.segments.size() != 1 || m.segments[0].offset != 0 || m.segments[0].count != n ||
      m.segments[0].codec != fp32)
    return std::nullopt;
  return compression::fp32_body_view(wire::frame_bytes(payloads[0]), n);
}
}  // namespace

void PushPayload::check(const wire::Push& m, std::span<const zmq::message_t> payloads, uint64_t n,
                        uint64_t id) {
  if (m.segments.size() > kMaxSegments)
    throw WireError(ErrorCode::too_large,
                    fmt::format("push has {} segments, limit {}", m.segments.size(), kMaxSegments),
                    id);
  if (m.tokens > kMaxPushTokens)
    throw WireError(ErrorCode::bad_payload,
                    fmt::format("push.tokens is {}, at most {}", m.tokens, kMaxPushTokens), id);
  wire::check_frames(m.segments, payloads, id);
  uint64_t covered = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const auto& s = m.segments[i];
    if (!compression::is_codec_id(s.codec))
      throw WireError(ErrorCode::bad_codec,
                      fmt::format("segment {}: codec id {} is not a codec", i, s.codec), id);
    if (s.offset < covered || s.count > n || s.offset > n - s.count)
      throw WireError(
          ErrorCode::bad_range,
          fmt::format("segment {}: range [{}, +{}) is outside shard {} of {} elements or overlaps "
                      "the previous segment",
                      i, s.offset, s.count, m.shard, n),
          id);
    covered = s.offset + s.count;
  }
}

PushPayload::Delta PushPayload::read(const wire::Push& m, std::span<const zmq::message_t> payloads,
                                     uint64_t n, uint64_t id) {
  if (auto values = fp32_in_place(m, payloads, n)) return {*values, true};
  return {decode(m, payloads, n, id), false};
}

bool PushPayload::finite(const Delta& d, const wire::Push& m,
                         std::span<const zmq::message_t> payloads, uint64_t id) {
  if (!d.in_place) return all_finite(d.values);
  bool finite = true;
  checked_segment(0, m.segments[0], wire::frame_bytes(payloads[0]), id,
                  [&](size_t, ConstByteSpan block) {
                    finite = all_finite({reinterpret_cast<const float*>(block.data()),
                                         block.size() / sizeof(float)}) &&
                             finite;
                  });
  return finite;
}

ConstFloatSpan PushPayload::decode(const wire::Push& m, std::span<const zmq::message_t> payloads,
                                   uint64_t n, uint64_t id) {
  if (scratch_.size() != n) scratch_.resize(n);
  uint64_t filled = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const auto& s = m.segments[i];
    const auto bytes = wire::frame_bytes(payloads[i]);
    const auto header = checked_segment(i, s, bytes, id, {});
    std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(filled),
              scratch_.begin() + static_cast<std::ptrdiff_t>(s.offset), 0.0f);
    const auto out = FloatSpan(scratch_).subspan(s.offset, s.count);
    try {
      const auto decoded = compression::decode_view(header, bytes, out);
      if (decoded.data() != out.data()) std::copy(decoded.begin(), decoded.end(), out.begin());
    } catch (const InputError& e) {
      throw WireError(ErrorCode::bad_payload, fmt::format("segment {}: {}", i, e.what()), id);
    }
    filled = s.offset + s.count;
  }
  std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(filled), scratch_.end(), 0.0f);
  return scratch_;
}

}  // namespace geotrain::server
