// Internal: the zstd stage's packing of an inner payload (compression/zstd_stage.cpp), for every
// encoder that makes the inner payload itself (the zstd stage, compression/device_feedback.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "compression/payload.hpp"
#include "core/span.hpp"

struct ZSTD_CCtx_s;  // zstd.h's ZSTD_CCtx

namespace geotrain::compression::detail {

class ZstdPacker {
 public:
  // InputError unless 1 <= level <= 19.
  explicit ZstdPacker(int level);
  // out = the zstd payload of `inner_payload`, the payload of codec `inner` for n elements.
  void pack(ConstByteSpan inner_payload, uint64_t n, CodecId inner, Bytes& out);

 private:
  struct FreeContext {
    void operator()(ZSTD_CCtx_s* c) const;
  };
  std::unique_ptr<ZSTD_CCtx_s, FreeContext> cctx_;
};

}  // namespace geotrain::compression::detail
