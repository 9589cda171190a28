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
// What the payload of push segment i says it is (its codec, its element count), before its body
// is read: a malformed header is bad_payload, a codec that is not one bad_codec.
compression::PayloadHeader peeked(size_t i, ConstByteSpan bytes, uint64_t request_id) {
  compression::PayloadHeader header;
  try {
    header = compression::peek_header(bytes);
  } catch (const InputError& e) {
    throw WireError(ErrorCode::bad_payload, fmt::format("segment {}: {}", i, e.what()), request_id);
  }
  if (!compression::is_codec_id(static_cast<uint8_t>(header.codec)))
    throw WireError(ErrorCode::bad_codec,
                    fmt::format("segment {}: codec id {} is not a codec", i,
                                static_cast<unsigned>(header.codec)),
                    request_id);
  return header;
}

// The payload header of push segment i, checked (checksum included, `visit` seeing each block of
// the body as it is hashed).
compression::PayloadHeader checked_segment(size_t i, ConstByteSpan bytes, uint64_t request_id,
                                           const compression::BodyVisit& visit) {
  try {
    return compression::parse_header(bytes, visit);
  } catch (const InputError& e) {
    throw WireError(ErrorCode::bad_payload, fmt::format("segment {}: {}", i, e.what()), request_id);
  }
}

// The floats of a push that is one fp32 segment covering the shard, where they can be read in
// place; empty otherwise.
std::optional<ConstFloatSpan> fp32_in_place(const wire::Push& m,
                                            std::span<const wire::Frame> payloads, uint64_t n) {
  if (m.segments.size() != 1 || m.segments[0].offset != 0) return std::nullopt;
  const auto bytes = wire::frame_bytes(payloads[0]);
  const auto header = compression::peek_header(bytes);  // check() passed: it reads
  if (header.elements != n || header.codec != compression::CodecId::fp32) return std::nullopt;
  return compression::fp32_body_view(bytes, n);
}
}  // namespace

void PushPayload::check(const wire::Push& m, std::span<const wire::Frame> payloads, uint64_t n,
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
    const uint64_t count = peeked(i, wire::frame_bytes(payloads[i]), id).elements;
    if (s.offset < covered || count > n || s.offset > n - count)
      throw WireError(
          ErrorCode::bad_range,
          fmt::format("segment {}: range [{}, +{}) is outside shard {} of {} elements or overlaps "
                      "the previous segment",
                      i, s.offset, count, m.shard, n),
          id);
    covered = s.offset + count;
  }
}

PushPayload::Delta PushPayload::read(const wire::Push& m, std::span<const wire::Frame> payloads,
                                     uint64_t n, uint64_t id) {
  if (auto values = fp32_in_place(m, payloads, n)) return {*values, true};
  return {decode(m, payloads, n, id), false};
}

bool PushPayload::finite(const Delta& d, std::span<const wire::Frame> payloads, uint64_t id) {
  if (!d.in_place) return all_finite(d.values);
  bool finite = true;
  checked_segment(0, wire::frame_bytes(payloads[0]), id, [&](size_t, ConstByteSpan block) {
    finite =
        all_finite({reinterpret_cast<const float*>(block.data()), block.size() / sizeof(float)}) &&
        finite;
  });
  return finite;
}

ConstFloatSpan PushPayload::decode(const wire::Push& m, std::span<const wire::Frame> payloads,
                                   uint64_t n, uint64_t id) {
  if (scratch_.size() != n) scratch_.resize(n);
  uint64_t filled = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const auto& s = m.segments[i];
    const auto bytes = wire::frame_bytes(payloads[i]);
    const auto header = checked_segment(i, bytes, id, {});
    std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(filled),
              scratch_.begin() + static_cast<std::ptrdiff_t>(s.offset), 0.0f);
    const auto out = FloatSpan(scratch_).subspan(s.offset, header.elements);
    try {
      const auto decoded = compression::decode_view(header, bytes, out);
      if (decoded.data() != out.data()) std::copy(decoded.begin(), decoded.end(), out.begin());
    } catch (const InputError& e) {
      throw WireError(ErrorCode::bad_payload, fmt::format("segment {}: {}", i, e.what()), id);
    }
    filled = s.offset + header.elements;
  }
  std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(filled), scratch_.end(), 0.0f);
  return scratch_;
}

}  // namespace geotrain::server
