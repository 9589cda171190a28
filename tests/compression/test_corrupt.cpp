// Every corrupt-payload case gets an InputError naming the problem, and the output is untouched.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;
using geotrain::test::encode;
using geotrain::test::poke;
using geotrain::test::reseal;

namespace {

constexpr float kSentinel = -7.25f;

// Decodes and expects an InputError whose message contains `needle`; y must stay all sentinel.
void expect_rejected(const Codec& codec, ConstByteSpan payload, size_t n,
                     const std::string& needle) {
  std::vector<float> y(n, kSentinel);
  std::string message;
  bool rejected = false;
  try {
    codec.decode(payload, y);
  } catch (const InputError& e) {
    rejected = true;
    message = e.what();
  }
  CHECK_MESSAGE(rejected, "decode accepted the payload");
  CHECK_MESSAGE(message.find(needle) != std::string::npos, "message: '", message, "', wanted '",
                needle, "'");
  for (float v : y) REQUIRE(v == kSentinel);
  std::vector<float> acc(n, kSentinel);
  CHECK_THROWS_AS(codec.decode_add(payload, acc), InputError);
  for (float v : acc) REQUIRE(v == kSentinel);
}

}  // namespace

TEST_CASE("a payload truncated at any length is rejected") {
  auto x = test::gaussian(300, 1);
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    auto codec = make_codec(spec);
    Bytes p = encode(spec, x);
    for (size_t len = 0; len < p.size(); len += (len < 64 ? 1 : 7)) {
      CAPTURE(len);
      // Shorter than the header, or a body shorter than the header says: "truncated" either way.
      expect_rejected(*codec, ConstByteSpan(p).first(len), x.size(), "truncated");
    }
  }
}

TEST_CASE("a garbled byte anywhere is rejected") {
  auto x = test::gaussian(300, 2);
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    auto codec = make_codec(spec);
    const Bytes clean = encode(spec, x);
    for (size_t at = 0; at < clean.size(); at += (at < kHeaderBytes ? 1 : 5)) {
      CAPTURE(at);
      Bytes p = clean;
      p[at] ^= std::byte{0x5a};
      expect_rejected(*codec, p, x.size(), "codec payload");
    }
  }
}

TEST_CASE("unknown flags and a stray aux field are rejected even with a valid checksum") {
  auto x = test::gaussian(100, 3);
  Bytes p = encode("int8", x);
  poke<uint16_t>(p, 6, 0x8000);
  reseal(p);
  expect_rejected(*make_codec("int8"), p, x.size(), "unknown flags 0x8000");
  p = encode("onebit", x);
  poke<uint32_t>(p, 12, 5);
  reseal(p);
  expect_rejected(*make_codec("onebit"), p, x.size(), "aux field is 5, must be 0");
}

TEST_CASE("trailing bytes after the body are rejected") {
  auto x = test::gaussian(100, 3);
  Bytes p = encode("int8", x);
  p.push_back(std::byte{0});
  expect_rejected(*make_codec("int8"), p, x.size(), "trailing bytes");
}

TEST_CASE("header fields are validated: magic, codec, version, element count") {
  auto x = test::gaussian(256, 4);
  auto onebit = make_codec("onebit");
  const Bytes clean = encode("onebit", x);

  Bytes p = clean;
  poke<uint32_t>(p, 0, 0xdeadbeef);
  expect_rejected(*onebit, p, x.size(), "bad magic");

  expect_rejected(*make_codec("int8"), clean, x.size(),
                  "encoded with onebit, but this decoder is int8");

  p = clean;
  poke<uint8_t>(p, 5, 2);
  reseal(p);
  expect_rejected(*onebit, p, x.size(), "format version 2 is not supported");

  expect_rejected(*onebit, clean, x.size() + 1, "holds 256 elements, but the output has 257");

  p = clean;
  poke<uint64_t>(p, 16, uint64_t{1} << 40);
  reseal(p);
  std::vector<float> y(4, kSentinel);
  CHECK_THROWS_WITH_AS(decode_payload(p, y), doctest::Contains("exceeds the limit"), InputError);

  p = clean;
  poke<uint8_t>(p, 4, 200);
  reseal(p);
  std::vector<float> z(x.size(), kSentinel);
  CHECK_THROWS_WITH_AS(decode_payload(p, z), doctest::Contains("unknown codec id 200"), InputError);
  for (float v : z) REQUIRE(v == kSentinel);
}

TEST_CASE("a body length that does not match elements and chunk is rejected") {
  auto x = test::gaussian(1000, 5);
  for (const std::string spec : {"int8", "int4", "onebit", "fp16", "fp4", "topk:bits=2"}) {
    CAPTURE(spec);
    Bytes p = encode(spec, x);
    p.resize(p.size() - 4);
    reseal(p);
    expect_rejected(*make_codec(spec), p, x.size(), "body is");
  }
}

TEST_CASE("an invalid chunk field is rejected") {
  auto x = test::gaussian(1000, 6);
  for (uint32_t bad : {0u, 31u, 48u, (1u << 21)}) {
    Bytes p = encode("onebit", x);
    poke<uint32_t>(p, 8, bad);
    reseal(p);
    expect_rejected(*make_codec("onebit"), p, x.size(), fmt::format("chunk {} is invalid", bad));
  }
  Bytes p = encode("fp32", x);
  poke<uint32_t>(p, 8, 64);
  reseal(p);
  expect_rejected(*make_codec("fp32"), p, x.size(), "chunk field is 64, must be 0");
}

TEST_CASE("topk payloads with bad indices are rejected") {
  std::vector<float> x(1000, 0.0f);
  x[10] = 5;
  x[20] = -6;
  x[900] = 7;
  auto topk = make_codec("topk:ratio=0.003");
  const Bytes clean = encode("topk:ratio=0.003", x);  // k = 3: values then varints 10, 10, 880
  const size_t idx = kHeaderBytes + 12;

  Bytes p = clean;
  p[idx + 1] = std::byte{0};  // second gap 0: a repeated index
  reseal(p);
  expect_rejected(*topk, p, x.size(), "repeats index");

  p = clean;
  p[idx] = std::byte{0x7f};  // first index 127, then 137, then 1017 >= 1000
  reseal(p);
  expect_rejected(*topk, p, x.size(), "out of range");

  p = clean;
  p.pop_back();  // cut the last varint in half
  reseal(p);
  expect_rejected(*topk, p, x.size(), "truncated");

  p = clean;
  p.push_back(std::byte{1});
  reseal(p);
  expect_rejected(*topk, p, x.size(), "trailing bytes after the last index");

  p = clean;
  poke<uint32_t>(p, 12, 2000);  // k larger than n
  reseal(p);
  expect_rejected(*topk, p, x.size(), "exceeds the element count");

  p = clean;
  poke<uint32_t>(p, 12, 900);  // k values cannot fit in the body
  reseal(p);
  expect_rejected(*topk, p, x.size(), "cannot hold");

  p = clean;
  for (int i = 0; i < 11; ++i) p.insert(p.begin() + idx, std::byte{0xff});  // an 11-byte varint
  reseal(p);
  expect_rejected(*topk, p, x.size(), "overflows 64 bits");
}

TEST_CASE("zstd payloads with a corrupt or oversized frame are rejected") {
  auto x = test::gaussian(2000, 7);
  auto stage = make_codec("int8+zstd");
  const Bytes clean = encode("int8+zstd", x);

  Bytes p = clean;
  p[kHeaderBytes + p.size() / 2] ^= std::byte{0xff};
  reseal(p);
  expect_rejected(*stage, p, x.size(), "codec payload: zstd: corrupt frame");

  p = clean;
  poke<uint32_t>(p, 12, 8);  // inner codec: zstd again
  reseal(p);
  expect_rejected(*stage, p, x.size(), "not a codec zstd can wrap");

  p = clean;
  poke<uint32_t>(p, 12, 6);  // inner codec claimed onebit, frame holds int8
  reseal(p);
  expect_rejected(*stage, p, x.size(), "encoded with int8, but this decoder is onebit");

  // A frame that claims far more content than 2000 elements can need (a decompression bomb).
  std::vector<float> big(1 << 20, 0.0f);
  Bytes bomb = encode("fp32+zstd", big);
  poke<uint64_t>(bomb, 16, 2000);
  reseal(bomb);
  expect_rejected(*stage, bomb, x.size(), "more than 2000 elements can need");

  p = clean;
  p.resize(kHeaderBytes + 3);
  reseal(p);
  expect_rejected(*stage, p, x.size(), "not a zstd frame");
}

// Regression (fuzz/corpus/codec_decode/crash-topk-varint-shift-70.bin): a 10th varint byte with
// bit 63 set and a continuation bit passed the overflow check, and the 11th was shifted by 70
// (undefined behaviour, reported by UBSan in the libFuzzer build).
TEST_CASE("a topk index varint that continues past bit 63 is rejected") {
  std::vector<float> x(1000, 0.0f);
  x[10] = 5;
  auto topk = make_codec("topk:ratio=0.001");
  const Bytes clean = encode("topk:ratio=0.001", x);  // k = 1: one value, then varint 10
  const size_t idx = kHeaderBytes + 4;
  Bytes p = clean;
  p.erase(p.begin() + idx, p.end());
  for (int i = 0; i < 9; ++i) p.push_back(std::byte{0x80});  // bits 0..62: zero, continued
  p.push_back(std::byte{0x81});                              // bit 63, and a continuation bit
  p.push_back(std::byte{0x01});                              // what would be bit 70
  reseal(p);
  expect_rejected(*topk, p, x.size(), "overflows 64 bits");
}

// Regressions (fuzz/corpus/codec_*/crash-*-empty-body-odd-address.bin): an empty body at an odd
// address was "aligned" by memcpy into an empty vector's null data() (undefined; UBSan).
TEST_CASE("a payload of zero elements decodes from an odd address") {
  for (const char* spec : {"fp32", "int8", "onebit", "topk:ratio=0.02,bits=2"}) {
    CAPTURE(spec);
    const Bytes clean = encode(spec, std::vector<float>{});
    Bytes shifted(clean.size() + 1);
    std::memcpy(shifted.data() + 1, clean.data(), clean.size());
    std::vector<float> y;
    CHECK_NOTHROW(make_codec(spec)->decode(ConstByteSpan(shifted).subspan(1), y));
  }
}
