// Builds codecs from spec strings, explicitly (no registry):
//
//   spec   := codec [":" option ("," option)*] ["+zstd" [":level=" N]]
//   codec  := fp32 | fp16 | bf16 | int8 | int4 | fp4 | onebit | topk | powersgd
//   option := key "=" value | flag
//     int8, int4: chunk=N (multiple of 32, default 1024), stochastic, seed=N
//     onebit:     chunk=N, scale=mean|rms (default mean: mean |x| per chunk; rms: sqrt(mean x^2))
//     fp4:        chunk=N
//     topk:       ratio=R (0 < R <= 1, default 0.01), sample=N (default 4096)
//                 or, with quantised values and chunked selection: ratio=R, bits=2|4|8, chunk=N
//     powersgd:   rank=R (1..256, default 4), fallback=fp32|fp16|bf16|int8|int4|fp4|onebit (for
//                 spans that are not matrices, default fp16), seed=N (the first Q's)
//
// Examples: "onebit", "int4:chunk=256,stochastic", "topk:ratio=0.001+zstd", "onebit+zstd:level=1",
// "fp4:chunk=32", "topk:ratio=0.02,bits=2", "onebit:scale=rms", "powersgd:rank=8,fallback=onebit".
// A bad spec throws InputError naming the part that is wrong and what is allowed.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "compression/codec.hpp"
#include "compression/codecs.hpp"

namespace geotrain::compression {

std::unique_ptr<Codec> make_codec(std::string_view spec);

// The spec's settings, checked as make_codec checks them (the same errors), and the codec they
// describe. make_codec(spec) is make_codec(parse_codec_spec(spec)).
CodecSettings parse_codec_spec(std::string_view spec);
std::unique_ptr<Codec> make_codec(const CodecSettings& settings);

// Every codec with default settings, and a few variants: the set `geotrain bench codecs` runs.
std::vector<std::string> standard_codec_specs();

}  // namespace geotrain::compression
