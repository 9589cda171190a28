// Internal: the decoders of every codec, dispatched on a validated header. Used by the Codec
// classes and by decode_payload(). Not part of the public interface of compression/.
#pragma once

#include <optional>
#include <vector>

#include "compression/codecs.hpp"
#include "compression/payload.hpp"
#include "core/span.hpp"

namespace geotrain::compression::detail {

// Validates `payload` completely and decodes it into y (add: accumulate). Throws InputError
// before touching y when anything is wrong; `expected` rejects payloads of another codec.
void decode_checked(ConstByteSpan payload, FloatSpan y, bool add, std::optional<CodecId> expected);

// Per-family validation + decode of a parsed payload; each throws before writing y.
void decode_dense(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add);
void decode_topk(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add);
void decode_qtopk(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add);
void decode_zstd(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add);
void decode_powersgd(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add);

// Wire buffers need not be aligned: `body`'s data where floats can be read from it, or, when it
// is not aligned for them, an aligned copy made in `copy`.
const std::byte* float_aligned(ConstByteSpan body, std::vector<float>& copy);

void require_chunk(uint32_t chunk, std::string_view what);
// QuantOptions::step: 0, or within [kMinStep, kMaxStep].
void require_step(float step, std::string_view what);

// The dense codecs (fp32, fp16, bf16, int8, int4, fp4, onebit): whether a codec has per-chunk
// scales, the exact body size for n elements, and the checks of a parsed dense payload's own
// fields (after them every bit pattern of the body is a valid encoding).
bool is_chunked(CodecId id);
// fp32, fp16, bf16 and the chunked ones.
bool is_dense(CodecId id);
uint64_t dense_body_bytes(CodecId id, uint64_t n, uint32_t chunk);
void check_dense(const PayloadHeader& h);
// What every decoder checks beyond parse_header: the codec (when `expected`), the format
// version and the element count.
void check_parsed(const PayloadHeader& h, size_t y_size, std::optional<CodecId> expected);

// A codec whose two encodes are one pass, encode_into (residual null: no error feedback, else
// it is updated in the same pass), and whose payloads decode through decode_checked, refusing
// another codec's: the dense codecs and topk with quantised values.
class OnePassCodec : public Codec {
 public:
  void encode(ConstFloatSpan x, Bytes& out) final { encode_into(x.data(), nullptr, x.size(), out); }
  bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) final;
  void decode(ConstByteSpan payload, FloatSpan y) const final {
    decode_checked(payload, y, false, id());
  }
  void decode_add(ConstByteSpan payload, FloatSpan y) const final {
    decode_checked(payload, y, true, id());
  }

 protected:
  virtual void encode_into(const float* g, float* residual, size_t n, Bytes& out) = 0;
};

// The topk codec with quantised values (options.bits != 0); make_topk_codec picks it.
std::unique_ptr<Codec> make_qtopk_codec(const TopkOptions& options);

}  // namespace geotrain::compression::detail
