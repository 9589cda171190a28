// Shared by the codec fuzz targets (codec_decode.cpp, codec_zstd.cpp): the codecs to fuzz, taken
// from the factory so that a codec added there is fuzzed too, and one decode with the checks of
// the decoders' contract (compression/codec.hpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec.hpp"
#include "compression/factory.hpp"
#include "fuzz/fuzz_target.hpp"

namespace geotrain::fuzz {

// Largest output a target allocates for a payload's claimed element count (256 KiB of floats):
// more than any dense payload of libFuzzer's default 4 KiB inputs can hold (onebit: 32768).
inline constexpr uint64_t kMaxFuzzElements = uint64_t{1} << 16;

// Every codec of compression::standard_codec_specs() without its stages ("int8", "topk:ratio=
// 0.01", ...), each once; with `zstd`, the same codecs followed by the zstd stage.
inline std::vector<std::unique_ptr<compression::Codec>> factory_codecs(bool zstd) {
  std::vector<std::string> specs;
  for (const std::string& spec : compression::standard_codec_specs()) {
    const std::string base = spec.substr(0, spec.find('+'));
    if (std::find(specs.begin(), specs.end(), base) == specs.end()) specs.push_back(base);
  }
  std::vector<std::unique_ptr<compression::Codec>> codecs;
  for (const auto& spec : specs)
    codecs.push_back(compression::make_codec(zstd ? spec + "+zstd" : spec));
  return codecs;
}

template <typename T>
T read_le(ConstByteSpan payload, size_t offset) {
  T value{};
  if (payload.size() >= offset + sizeof value)
    std::memcpy(&value, payload.data() + offset, sizeof value);
  return value;
}

// Sets a payload's body length and checksum to those of its bytes, so that mutations of the
// other fields and of the body reach the codec's own checks (the checksum would refuse nearly
// all of them first). Payloads shorter than a header are left as they are.
inline void fix_header(ByteSpan payload) {
  if (payload.size() < compression::kHeaderBytes) return;
  const uint64_t body = payload.size() - compression::kHeaderBytes;
  std::memcpy(payload.data() + 24, &body, sizeof body);
  const uint64_t sum = compression::payload_checksum(payload);
  std::memcpy(payload.data() + 32, &sum, sizeof sum);
}

enum class DecodePath : uint8_t { decode, decode_add, view };

// Decodes `payload` with `codec` (nullptr: by the codec id in its header, decode_payload) into an
// output of the element count the payload claims (or 7 elements when it claims more than
// kMaxFuzzElements, which must then be refused). Checks the contract: an InputError leaves the
// output bit-identical; a decode that succeeds gives the same output when repeated.
inline void check_decode(const compression::Codec* codec, ConstByteSpan payload, DecodePath path) {
  const uint64_t claimed = read_le<uint64_t>(payload, 16);
  const size_t n = claimed <= kMaxFuzzElements ? static_cast<size_t>(claimed) : 7;
  std::vector<float> before(n);
  for (size_t i = 0; i < n; ++i) before[i] = static_cast<float>(i % 7) - 3.0f;
  if (n > 0) before[0] = -0.0f;

  auto run = [&](std::vector<float>& y) {
    switch (path) {
      case DecodePath::decode:
        codec ? codec->decode(payload, y) : compression::decode_payload(payload, y);
        return;
      case DecodePath::decode_add:
        codec ? codec->decode_add(payload, y) : compression::decode_add_payload(payload, y);
        return;
      case DecodePath::view: {
        const auto header = compression::parse_header(payload);
        const ConstFloatSpan v = compression::decode_view(header, payload, y);
        GT_FUZZ_CHECK(v.size() == y.size(), "decode_view returned a span of another size");
        if (v.data() != y.data()) std::copy(v.begin(), v.end(), y.begin());
        return;
      }
    }
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };

  std::vector<float> y = before;
  if (!accepts([&] { run(y); })) {
    GT_FUZZ_CHECK(same(y, before), "a decoder that refused its input changed the output");
    return;
  }
  std::vector<float> again = before;
  run(again);
  GT_FUZZ_CHECK(same(y, again), "decoding the same payload twice gave different outputs");
}

}  // namespace geotrain::fuzz
