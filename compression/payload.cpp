#include "compression/payload.hpp"

#include <xxhash.h>

#include <bit>
#include <cstring>

#include "core/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "the payload format is little-endian; a big-endian port needs byte swaps here");

namespace geotrain::compression {

std::string codec_name(CodecId id) { return codec_name(static_cast<uint8_t>(id)); }

std::string codec_name(uint8_t raw) {
  switch (static_cast<CodecId>(raw)) {
    case CodecId::fp32: return "fp32";
    case CodecId::fp16: return "fp16";
    case CodecId::bf16: return "bf16";
    case CodecId::int8: return "int8";
    case CodecId::int4: return "int4";
    case CodecId::onebit: return "onebit";
    case CodecId::topk: return "topk";
    case CodecId::zstd: return "zstd";
  }
  return fmt::format("unknown({})", raw);
}

uint64_t payload_checksum(ConstByteSpan payload) {
  const uint64_t header_hash = XXH3_64bits(payload.data(), 32);
  const ConstByteSpan body = payload.subspan(kHeaderBytes);
  return XXH3_64bits_withSeed(body.data(), body.size(), header_hash);
}

namespace {
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
}  // namespace

void write_header(PayloadHeader h, ByteSpan payload) {
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
  put<uint64_t>(payload, 32, payload_checksum(payload));
}

PayloadHeader parse_header(ConstByteSpan payload) {
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
  const uint64_t sum = payload_checksum(payload);
  GT_REQUIRE(sum == h.checksum,
             "codec payload: {}: checksum mismatch (header 0x{:016x}, content 0x{:016x}): garbled",
             codec_name(static_cast<uint8_t>(h.codec)), h.checksum, sum);
  GT_REQUIRE((h.flags & ~kFlagStochastic) == 0, "codec payload: {}: unknown flags 0x{:04x}",
             codec_name(static_cast<uint8_t>(h.codec)), h.flags);
  return h;
}

}  // namespace geotrain::compression
