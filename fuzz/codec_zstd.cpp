// Fuzz target: the codec decoders behind the zstd stage, for every codec the factory builds
// followed by "+zstd" (compression::standard_codec_specs(), without stages, plus zstd).
//
// Input: [selector][flags][bytes...]
//   selector < 128: decode_payload (dispatch on the header);
//            >= 128: codec number (selector - 128) modulo their count, each "<codec>+zstd"
//   flags bit 0: fix the inner payload's body length and checksum (fix_header)
//         bits 1-2: 0 decode, 1 decode_add, 2 decode_view (after parse_header), 3 decode
//         bit 3: decode from an odd address
//         bit 4: raw: the bytes are the whole zstd payload (its header is fixed when bit 0 is
//                set), so that mutations reach the zstd frame itself
//         bit 5: the zstd frame does not state its content size
//         bit 6: the outer header claims one element more than the inner payload
// Otherwise the bytes are the inner payload: the target compresses them into one zstd frame and
// writes the outer header (codec zstd, aux = the inner codec byte, elements = the inner count),
// as the zstd stage does, so that mutations of the inner payload reach every inner decoder.
// Seeds are valid inner payloads of every codec (flags 0x01).
#include <zstd.h>

#include "compression/payload.hpp"
#include "fuzz/codec_check.hpp"

using namespace geotrain;

namespace {

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

// The zstd payload around `inner`, as compression/zstd_stage.cpp writes it.
Bytes wrap(ConstByteSpan inner, uint8_t flags) {
  static const std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx{ZSTD_createCCtx()};
  GT_FUZZ_CHECK(cctx != nullptr, "ZSTD_createCCtx failed");
  ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, flags & 0x20 ? 0 : 1);
  Bytes out(compression::kHeaderBytes + ZSTD_compressBound(inner.size()));
  const size_t packed =
      ZSTD_compress2(cctx.get(), out.data() + compression::kHeaderBytes,
                     out.size() - compression::kHeaderBytes, inner.data(), inner.size());
  GT_FUZZ_CHECK(!ZSTD_isError(packed), "ZSTD_compress2 failed");
  out.resize(compression::kHeaderBytes + packed);
  compression::PayloadHeader h;
  h.codec = compression::CodecId::zstd;
  h.aux = fuzz::read_le<uint8_t>(inner, 4);
  h.elements = fuzz::read_le<uint64_t>(inner, 16) + (flags & 0x40 ? 1 : 0);
  compression::write_header(h, out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto codecs = fuzz::factory_codecs(true);
  fuzz::InputReader in(data, size);
  const uint8_t selector = in.byte();
  const uint8_t flags = in.byte();
  const auto rest = in.rest();

  Bytes bytes(rest.size());
  if (!rest.empty()) std::memcpy(bytes.data(), rest.data(), rest.size());
  if (flags & 0x01) fuzz::fix_header(bytes);
  const Bytes outer = flags & 0x10 ? bytes : wrap(bytes, flags);

  const size_t misalign = flags & 0x08 ? 1 : 0;
  Bytes storage(outer.size() + misalign);
  if (!outer.empty()) std::memcpy(storage.data() + misalign, outer.data(), outer.size());
  const ConstByteSpan payload = ConstByteSpan(storage).subspan(misalign);

  const compression::Codec* codec =
      selector >= 128 ? codecs[(selector - 128u) % codecs.size()].get() : nullptr;
  const auto path = static_cast<fuzz::DecodePath>(((flags >> 1) & 3) % 3);
  fuzz::check_decode(codec, payload, path);
  return 0;
}
