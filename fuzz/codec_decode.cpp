// Fuzz target: the codec decoders without the zstd stage, for every codec the factory builds
// (compression::standard_codec_specs(), without stages), and decode_payload/decode_view.
//
// Input: [selector][flags][payload...]
//   selector < 128: the codec whose id is the payload's codec byte (decode_payload when none);
//            >= 128: codec number (selector - 128) modulo their count, whatever the payload says
//   flags bit 0: set the payload's body length and checksum to match its bytes (fix_header)
//         bits 1-2: 0 decode, 1 decode_add, 2 decode_view (after parse_header), 3 decode
//         bit 3: decode from an odd address (wire frames carry no alignment)
// Seeds are valid payloads of every codec (flags 0x01).
#include "fuzz/codec_check.hpp"

using namespace geotrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto codecs = fuzz::factory_codecs(false);
  fuzz::InputReader in(data, size);
  const uint8_t selector = in.byte();
  const uint8_t flags = in.byte();
  const auto rest = in.rest();

  const size_t misalign = flags & 0x08 ? 1 : 0;
  Bytes storage(rest.size() + misalign);
  if (!rest.empty()) std::memcpy(storage.data() + misalign, rest.data(), rest.size());
  const ByteSpan payload = ByteSpan(storage).subspan(misalign);
  if (flags & 0x01) fuzz::fix_header(payload);

  const compression::Codec* codec = nullptr;
  if (selector >= 128) {
    codec = codecs[(selector - 128u) % codecs.size()].get();
  } else {
    const auto id = static_cast<compression::CodecId>(fuzz::read_le<uint8_t>(payload, 4));
    for (const auto& c : codecs)
      if (!codec && c->id() == id) codec = c.get();
  }
  const auto path = static_cast<fuzz::DecodePath>(((flags >> 1) & 3) % 3);
  fuzz::check_decode(codec, payload, path);
  return 0;
}
