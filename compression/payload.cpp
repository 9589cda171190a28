#include "compression/payload.hpp"

// Inlined, so that XXH3 is compiled for this target's vector unit (AVX2/AVX-512 with
// -march=native): the shared library is built for SSE2 and hashes about half as fast, and every
// payload is hashed once when written and once when read. The digest is the same on every path.
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined) as maybe-uninitialized there.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "the payload format is little-endian; a big-endian port needs byte swaps here");

namespace geotrain::compression {

std::string codec_name(CodecId id) { return codec_name(static_cast<uint8_t>(id)); }

std::string codec_name(uint8_t raw) {
  switch (static_cast<CodecId>(raw)) {
    case CodecId::fp32:
      return "fp32";
    case CodecId::fp16:
      return "fp16";
    case CodecId::bf16:
      return "bf16";
    case CodecId::int8:
      return "int8";
    case CodecId::int4:
      return "int4";
    case CodecId::onebit:
      return "onebit";
    case CodecId::topk:
      return "topk";
    case CodecId::zstd:
      return "zstd";
    case CodecId::fp4:
      return "fp4";
    case CodecId::qtopk:
      return "qtopk";
    case CodecId::powersgd:
      return "powersgd";
  }
  return fmt::format("unknown({})", raw);
}

uint64_t payload_checksum(ConstByteSpan payload) {
  const uint64_t header_hash = XXH3_64bits(payload.data(), 32);
  const ConstByteSpan body = payload.subspan(kHeaderBytes);
  return XXH3_64bits_withSeed(body.data(), body.size(), header_hash);
}

namespace {

// The checksum of payload_checksum(), hashed in kChecksumBlock pieces; `each` runs on every
// block, before (when reading) or after (when writing) it is hashed. XXH3's streaming state gives
// the digest of the one-shot call for the same bytes and seed.
template <typename Block, typename Each>
uint64_t blockwise_checksum(Block body, uint64_t header_hash, bool each_first, Each&& each) {
  // A state on the stack must be initialised before a seeded reset: reset_withSeed skips deriving
  // its secret when the state's stale seed equals the new one, which the previous payload with
  // the same header leaves behind at the same stack address (xxhash.h, XXH3_INITSTATE).
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  const auto reset = XXH3_64bits_reset_withSeed(&state, header_hash);
  GT_ASSERT(reset == XXH_OK, "XXH3 reset failed");
  for (size_t offset = 0; offset < body.size(); offset += kChecksumBlock) {
    const auto block = body.subspan(offset, std::min(kChecksumBlock, body.size() - offset));
    if (each_first) each(offset, block);
    const auto updated = XXH3_64bits_update(&state, block.data(), block.size());
    GT_ASSERT(updated == XXH_OK, "XXH3 update failed");
    if (!each_first) each(offset, block);
  }
  return XXH3_64bits_digest(&state);
}

uint64_t streamed_checksum(ConstByteSpan payload, const BodyVisit& visit) {
  return blockwise_checksum(payload.subspan(kHeaderBytes), XXH3_64bits(payload.data(), 32), false,
                            visit);
}

template <typename T>
void put(ByteSpan out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof value);
}
template <typename T>
T get(ConstByteSpan in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof value);
  return value;
}

// Header bytes 0..31: everything but the checksum.
void write_fields(const PayloadHeader& h, ByteSpan payload) {
  GT_ASSERT(payload.size() >= kHeaderBytes, "payload buffer of {} bytes has no room for a header",
            payload.size());
  const size_t body_bytes = payload.size() - kHeaderBytes;
  put<uint32_t>(payload, 0, kPayloadMagic);
  put<uint8_t>(payload, 4, static_cast<uint8_t>(h.codec));
  put<uint8_t>(payload, 5, h.version);
  put<uint16_t>(payload, 6, h.flags);
  put<uint32_t>(payload, 8, h.chunk);
  put<uint32_t>(payload, 12, h.aux);
  put<uint64_t>(payload, 16, h.elements);
  put<uint64_t>(payload, 24, body_bytes);
}
}  // namespace

void write_header(PayloadHeader h, ByteSpan payload) {
  write_fields(h, payload);
  put<uint64_t>(payload, 32, payload_checksum(payload));
}

void write_payload(PayloadHeader h, ByteSpan payload, const BodyFill& fill) {
  write_fields(h, payload);
  const uint64_t sum = blockwise_checksum(payload.subspan(kHeaderBytes),
                                          XXH3_64bits(payload.data(), 32), true, fill);
  put<uint64_t>(payload, 32, sum);
}

PayloadHeader parse_header(ConstByteSpan payload) { return parse_header(payload, BodyVisit()); }

PayloadHeader peek_header(ConstByteSpan payload) {
  GT_REQUIRE(payload.size() >= kHeaderBytes,
             "codec payload: truncated: {} bytes, shorter than the {}-byte header", payload.size(),
             kHeaderBytes);
  const auto magic = get<uint32_t>(payload, 0);
  GT_REQUIRE(magic == kPayloadMagic, "codec payload: bad magic 0x{:08x} (expected 0x{:08x})", magic,
             kPayloadMagic);
  PayloadHeader h;
  h.codec = static_cast<CodecId>(get<uint8_t>(payload, 4));
  h.version = get<uint8_t>(payload, 5);
  h.flags = get<uint16_t>(payload, 6);
  h.chunk = get<uint32_t>(payload, 8);
  h.aux = get<uint32_t>(payload, 12);
  h.elements = get<uint64_t>(payload, 16);
  h.body_bytes = get<uint64_t>(payload, 24);
  h.checksum = get<uint64_t>(payload, 32);
  GT_REQUIRE(h.elements <= kMaxElements, "codec payload: element count {} exceeds the limit {}",
             h.elements, kMaxElements);
  const uint64_t actual = payload.size() - kHeaderBytes;
  GT_REQUIRE(h.body_bytes == actual,
             "codec payload: {}: header says {} body bytes but {} are present{}",
             codec_name(static_cast<uint8_t>(h.codec)), h.body_bytes, actual,
             actual < h.body_bytes ? " (truncated)" : " (trailing bytes)");
  return h;
}

PayloadHeader parse_header(ConstByteSpan payload, const BodyVisit& visit) {
  const PayloadHeader h = peek_header(payload);
  const uint64_t sum = visit ? streamed_checksum(payload, visit) : payload_checksum(payload);
  GT_REQUIRE(sum == h.checksum,
             "codec payload: {}: checksum mismatch (header 0x{:016x}, content 0x{:016x}): garbled",
             codec_name(static_cast<uint8_t>(h.codec)), h.checksum, sum);
  GT_REQUIRE((h.flags & ~kFlagStochastic) == 0, "codec payload: {}: unknown flags 0x{:04x}",
             codec_name(static_cast<uint8_t>(h.codec)), h.flags);
  return h;
}

std::optional<ConstFloatSpan> fp32_body_view(ConstByteSpan payload, uint64_t elements) {
  if (payload.size() != kHeaderBytes + elements * sizeof(float)) return std::nullopt;
  const auto body = payload_body(payload);
  if (reinterpret_cast<uintptr_t>(body.data()) % alignof(float) != 0) return std::nullopt;
  return ConstFloatSpan(reinterpret_cast<const float*>(body.data()), elements);
}

}  // namespace geotrain::compression

#pragma GCC diagnostic pop
