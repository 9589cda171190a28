// One-pass payload helpers (compression/payload.hpp write_payload, parse_header with a visitor,
// compression/codec.hpp decode_view) against the two-pass calls they stand for.
#include <doctest/doctest.h>

#include <cstring>

#include "compression/codec.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;

TEST_CASE("a payload written block by block carries the checksum and bytes of write_header") {
  // Bodies around XXH3's short-input limits and around the block size.
  for (size_t body : {size_t{0}, size_t{4}, size_t{240}, size_t{244}, size_t{1024}, kChecksumBlock,
                      kChecksumBlock + 4, 3 * kChecksumBlock + 100}) {
    CAPTURE(body);
    Bytes one(kHeaderBytes + body), blocks(kHeaderBytes + body);
    for (size_t i = 0; i < body; ++i) one[kHeaderBytes + i] = static_cast<std::byte>(i * 31 + 7);
    PayloadHeader h;
    h.elements = body / 4;
    write_header(h, one);
    size_t next = 0;
    write_payload(h, blocks, [&](size_t offset, ByteSpan block) {
      REQUIRE(offset == next);
      REQUIRE(offset % kChecksumBlock == 0);
      REQUIRE(block.size() <= kChecksumBlock);
      std::memcpy(block.data(), one.data() + kHeaderBytes + offset, block.size());
      next += block.size();
    });
    CHECK(next == body);
    CHECK(blocks == one);
  }
}

TEST_CASE(
    "parse_header with a visitor shows every body block in order and fails as parse_header fails") {
  Bytes payload;
  make_codec("fp32")->encode(test::gaussian(100000, 3), payload);
  size_t seen = 0;
  const auto h = parse_header(payload, [&](size_t offset, ConstByteSpan block) {
    REQUIRE(offset == seen);
    REQUIRE(block.data() == payload.data() + kHeaderBytes + offset);
    seen += block.size();
  });
  CHECK(seen == payload.size() - kHeaderBytes);
  CHECK(h.checksum == parse_header(payload).checksum);
  payload[kHeaderBytes + 5 * kChecksumBlock / 2] ^= std::byte{4};
  CHECK_THROWS_AS(parse_header(payload, [](size_t, ConstByteSpan) {}), InputError);
  CHECK_THROWS_AS(parse_header(payload), InputError);
}

TEST_CASE(
    "decode_view reads an aligned fp32 payload in place and decodes anything else like "
    "decode_payload") {
  const auto x = test::gaussian(3000, 9);
  std::vector<float> scratch(x.size()), expected(x.size());
  SUBCASE("fp32, aligned: a view of the payload, no copy") {
    Bytes payload;
    make_codec("fp32")->encode(x, payload);
    const auto view = decode_view(parse_header(payload), payload, scratch);
    CHECK(reinterpret_cast<const std::byte*>(view.data()) == payload.data() + kHeaderBytes);
    CHECK(std::equal(view.begin(), view.end(), x.begin()));
  }
  SUBCASE("fp32 at an odd address: decoded into scratch") {
    Bytes payload;
    make_codec("fp32")->encode(x, payload);
    Bytes storage(payload.size() + 1);
    std::memcpy(storage.data() + 1, payload.data(), payload.size());
    const ConstByteSpan odd(storage.data() + 1, payload.size());
    const auto view = decode_view(parse_header(odd), odd, scratch);
    CHECK(view.data() == scratch.data());
    CHECK(std::equal(view.begin(), view.end(), x.begin()));
  }
  SUBCASE("onebit: decoded into scratch, as decode_payload does") {
    Bytes payload;
    make_codec("onebit")->encode(x, payload);
    decode_payload(payload, expected);
    const auto view = decode_view(parse_header(payload), payload, scratch);
    CHECK(view.data() == scratch.data());
    CHECK(std::memcmp(view.data(), expected.data(), expected.size() * sizeof(float)) == 0);
  }
  SUBCASE("a wrong element count is refused, scratch untouched") {
    Bytes payload;
    make_codec("fp32")->encode(x, payload);
    std::vector<float> short_scratch(x.size() - 1, 5.0f);
    CHECK_THROWS_AS(decode_view(parse_header(payload), payload, short_scratch), InputError);
    CHECK(short_scratch[0] == 5.0f);
  }
}
