// The self-describing codec payload: a fixed 40-byte little-endian header followed by the body.
//
//   offset size field
//        0    4 magic        "GTC1"
//        4    1 codec        CodecId
//        5    1 version      body format version of that codec
//        6    2 flags        bit 0: stochastic rounding was used (informational)
//        8    4 chunk        elements per scale chunk (0 for codecs without chunks); powersgd:
//                            the matrix's columns
//       12    4 aux          codec-specific: topk's k, zstd's inner codec id, qtopk's k per
//                            chunk (bits 0-23) and value bits (bits 24-31), powersgd's rank
//       16    8 elements     fp32 elements encoded
//       24    8 body_bytes   bytes after the header; the payload is exactly 40 + body_bytes
//       32    8 checksum     XXH3-64 of the body, seeded with XXH3-64 of header bytes 0..31
//
// parse_header validates everything that does not depend on the codec (size, magic, lengths,
// checksum); each codec then validates its own fields (chunk, body size, indices) before it
// writes a single output element. Every failure is an InputError naming the field and value.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/span.hpp"

namespace geotrain::compression {

enum class CodecId : uint8_t {
  fp32 = 1,
  fp16 = 2,
  bf16 = 3,
  int8 = 4,
  int4 = 5,
  onebit = 6,
  topk = 7,
  zstd = 8,
  fp4 = 9,        // E2M1 with a per-chunk scale
  qtopk = 10,     // topk with chunked selection and quantised values ("topk:...,bits=B")
  powersgd = 11,  // a rank-r factorisation P Q^T of a matrix (chunk: its columns, aux: r)
};

// True for the raw values that name a codec above (for fields read off the wire).
inline bool is_codec_id(uint8_t raw) {
  return raw >= static_cast<uint8_t>(CodecId::fp32) &&
         raw <= static_cast<uint8_t>(CodecId::powersgd);
}

// "int8" for CodecId::int8; "unknown(42)" for values that are not codecs.
std::string codec_name(CodecId id);
std::string codec_name(uint8_t raw);

inline constexpr uint32_t kPayloadMagic = 0x31435447u;  // "GTC1" read little-endian
inline constexpr size_t kHeaderBytes = 40;
inline constexpr uint16_t kFlagStochastic = 1u << 0;
// Largest element count a payload may claim: bounds every size computed from it.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 36;
inline constexpr uint32_t kMaxChunk = uint32_t{1} << 20;

struct PayloadHeader {
  CodecId codec = CodecId::fp32;
  uint8_t version = 1;
  uint16_t flags = 0;
  uint32_t chunk = 0;
  uint32_t aux = 0;
  uint64_t elements = 0;
  uint64_t body_bytes = 0;
  uint64_t checksum = 0;
};

// Writes `header` (with body_bytes and checksum computed from `body`) into the first 40 bytes.
void write_header(PayloadHeader header, ByteSpan payload);

// Reads and validates the header of a payload: size, magic, element bound, body length, flags,
// checksum. Throws InputError ("codec payload: ...") when any of them is wrong.
PayloadHeader parse_header(ConstByteSpan payload);
// The size, magic, element bound and body length alone, without the checksum (which covers the
// whole body) and the flags: what a payload says it is (its codec, its element count), for
// checks that come before the body is read. parse_header() must
// still pass before anything computed from the body is used.
PayloadHeader peek_header(ConstByteSpan payload);

// One pass instead of two over a large body: the body is handled in consecutive blocks of at
// most kChecksumBlock bytes, each hashed right after the caller wrote it (write_payload) or
// right before the caller reads it (parse_header with a visitor), while it is still in cache.
// The checksum is the same as write_header's. Blocks start at multiples of kChecksumBlock from
// the body, so a float body is seen as whole, aligned floats.
inline constexpr size_t kChecksumBlock = size_t{64} << 10;
using BodyFill = std::function<void(size_t offset, ByteSpan block)>;
using BodyVisit = std::function<void(size_t offset, ConstByteSpan block)>;

// write_header, with `fill` writing every byte of the body block by block first.
void write_payload(PayloadHeader header, ByteSpan payload, const BodyFill& fill);

// parse_header, showing the visitor each block of the body as it is hashed. The bytes are not
// verified until parse_header returns: a visitor may compute from them (a check, a sum) but must
// not act on the result before then. Each check fails as parse_header(payload) fails; the body
// is visited only once the header itself is known to be sound.
PayloadHeader parse_header(ConstByteSpan payload, const BodyVisit& visit);

// Body of a payload (after the header); call after parse_header succeeded.
inline ConstByteSpan payload_body(ConstByteSpan payload) { return payload.subspan(kHeaderBytes); }

// The floats of an fp32 payload of `elements` elements, as a view of its own bytes (valid while
// `payload` is): empty unless the payload is exactly a header and `elements` floats and its body
// is aligned for float. Nothing is checked: the caller may compute from the view while
// parse_header(payload, visit) checks the header and the checksum, and must not act on the result
// before that returned (a receiver reads a whole-shard fp32 push this way, without a copy).
std::optional<ConstFloatSpan> fp32_body_view(ConstByteSpan payload, uint64_t elements);

// The checksum a payload's header must carry: covers header bytes 0..31 and the whole body,
// so a flipped bit anywhere but in the checksum itself is caught.
uint64_t payload_checksum(ConstByteSpan payload);

}  // namespace geotrain::compression
