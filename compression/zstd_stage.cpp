// The zstd stage: compresses the whole payload of an inner codec. Outer header: codec zstd,
// aux = inner codec id, elements = n; body = one zstd frame whose content is the inner payload.
#include <zstd.h>

#include <memory>

#include "compression/codecs.hpp"
#include "compression/decode.hpp"
#include "compression/zstd_pack.hpp"
#include "core/check_zstd.hpp"
#include "core/error.hpp"

namespace geotrain::compression {
namespace {

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Largest inner payload any codec produces for n elements (topk at ratio 1: 4 + 10 bytes each;
// qtopk at most 4/32 + 1 + 20/8 bytes each, plus a byte of padding per chunk).
// powersgd's pieces may take more for few elements in many pieces.
uint64_t max_inner_payload(uint64_t n) {
  return std::max<uint64_t>(kHeaderBytes + 14 * n + 64, powersgd_max_payload_bytes(n));
}

class ZstdStage final : public Codec {
 public:
  ZstdStage(std::unique_ptr<Codec> inner, int level)
      : inner_(std::move(inner)), level_(level), packer_(level) {
    GT_ASSERT(inner_ != nullptr, "zstd stage without an inner codec");
    GT_REQUIRE(inner_->id() != CodecId::zstd, "zstd: cannot stack two zstd stages ('{}')",
               inner_->spec());
  }

  CodecId id() const override { return CodecId::zstd; }
  bool lossless() const override { return inner_->lossless(); }
  std::string spec() const override {
    return fmt::format("{}+zstd:level={}", inner_->spec(), level_);
  }
  size_t max_payload_bytes(size_t n) const override {
    return kHeaderBytes + ZSTD_compressBound(inner_->max_payload_bytes(n));
  }

  void encode(ConstFloatSpan x, Bytes& out) override {
    inner_->encode(x, inner_payload_);
    compress(x.size(), out);
  }

  bool encode_with_feedback(ConstFloatSpan g, FloatSpan residual, Bytes& out) override {
    if (!inner_->encode_with_feedback(g, residual, inner_payload_)) return false;
    compress(g.size(), out);
    return true;
  }

  bool uses_shape() const override { return inner_->uses_shape(); }
  void encode_matrix(ConstFloatSpan x, MatrixShape shape, uint64_t stream, Bytes& out) override {
    inner_->encode_matrix(x, shape, stream, inner_payload_);
    compress(x.size(), out);
  }
  void encode_pieces(ConstFloatSpan x, std::span<const SpanPiece> pieces, uint64_t stream,
                     Bytes& out) override {
    inner_->encode_pieces(x, pieces, stream, inner_payload_);
    compress(x.size(), out);
  }
  void reset_stream(uint64_t stream) override { inner_->reset_stream(stream); }
  std::map<uint64_t, std::vector<float>> stream_states() const override {
    return inner_->stream_states();
  }
  void restore_stream_state(uint64_t stream, MatrixShape shape, ConstFloatSpan values) override {
    inner_->restore_stream_state(stream, shape, values);
  }

  void decode(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, false, CodecId::zstd);
  }
  void decode_add(ConstByteSpan payload, FloatSpan y) const override {
    detail::decode_checked(payload, y, true, CodecId::zstd);
  }

 private:
  // The inner payload's own codec, which is not always the inner codec's (powersgd's fallback).
  void compress(size_t n, Bytes& out) {
    packer_.pack(inner_payload_, n, peek_header(inner_payload_).codec, out);
  }

  std::unique_ptr<Codec> inner_;
  int level_;
  detail::ZstdPacker packer_;
  Bytes inner_payload_;
};

}  // namespace

namespace detail {

void ZstdPacker::FreeContext::operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }

ZstdPacker::ZstdPacker(int level) {
  GT_REQUIRE(level >= 1 && level <= 19, "zstd: level {} is invalid: must be in [1, 19]", level);
  cctx_.reset(ZSTD_createCCtx());
  GT_ASSERT(cctx_ != nullptr, "ZSTD_createCCtx failed");
  GT_ZSTD_CHECK(ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_compressionLevel, level));
  // The frame states its size (decoders bound memory by it) and carries its own checksum.
  GT_ZSTD_CHECK(ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_contentSizeFlag, 1));
  GT_ZSTD_CHECK(ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_checksumFlag, 1));
}

void ZstdPacker::pack(ConstByteSpan inner_payload, uint64_t n, CodecId inner, Bytes& out) {
  out.resize(kHeaderBytes + ZSTD_compressBound(inner_payload.size()));
  const size_t packed = GT_ZSTD_CHECK(ZSTD_compress2(cctx_.get(), out.data() + kHeaderBytes,
                                                     out.size() - kHeaderBytes,
                                                     inner_payload.data(), inner_payload.size()));
  out.resize(kHeaderBytes + packed);
  PayloadHeader h;
  h.codec = CodecId::zstd;
  h.aux = static_cast<uint8_t>(inner);
  h.elements = n;
  write_header(h, out);
}

}  // namespace detail

std::unique_ptr<Codec> make_zstd_stage(std::unique_ptr<Codec> inner, int level) {
  return std::make_unique<ZstdStage>(std::move(inner), level);
}

namespace detail {

void decode_zstd(const PayloadHeader& h, ConstByteSpan body, FloatSpan y, bool add) {
  GT_REQUIRE(h.chunk == 0, "codec payload: zstd: chunk field is {}, must be 0", h.chunk);
  GT_REQUIRE(h.aux <= 0xff && is_codec_id(static_cast<uint8_t>(h.aux)) &&
                 h.aux != static_cast<uint8_t>(CodecId::zstd),
             "codec payload: zstd: inner codec id {} is not a codec zstd can wrap", h.aux);
  const unsigned long long size = ZSTD_getFrameContentSize(body.data(), body.size());
  GT_REQUIRE(size != ZSTD_CONTENTSIZE_ERROR, "codec payload: zstd: body is not a zstd frame");
  GT_REQUIRE(size != ZSTD_CONTENTSIZE_UNKNOWN,
             "codec payload: zstd: frame does not state its size");
  const uint64_t limit = max_inner_payload(h.elements);
  GT_REQUIRE(size <= limit,
             "codec payload: zstd: frame claims {} bytes, more than {} elements can need ({})",
             size, h.elements, limit);
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx{ZSTD_createDCtx()};
  GT_ASSERT(dctx != nullptr, "ZSTD_createDCtx failed");
  Bytes inner(size);
  const size_t got =
      ZSTD_decompressDCtx(dctx.get(), inner.data(), inner.size(), body.data(), body.size());
  GT_REQUIRE(!ZSTD_isError(got), "codec payload: zstd: corrupt frame: {}", ZSTD_getErrorName(got));
  GT_REQUIRE(got == size, "codec payload: zstd: frame decompressed to {} bytes, header said {}",
             got, size);
  decode_checked(inner, y, add, static_cast<CodecId>(h.aux));
}

}  // namespace detail
}  // namespace geotrain::compression
