// One-pass payload helpers (compression/payload.hpp write_payload, parse_header with a visitor,
// compression/codec.hpp decode_view) against the two-pass calls they stand for.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's layout
#include <xxhash.h>

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

namespace {
// Leaves, below the caller, what a stale XXH3 state with seed `seed` looks like wherever the next
// call's 64-byte aligned state may land: every word at the seed field's offset (mod 64) holds
// the seed, every word at extSecret's offset holds 0, and the rest (the secret) is garbage.
__attribute__((noinline)) void leave_stale_state(uint64_t seed) {
  constexpr size_t seed_word = offsetof(XXH3_state_t, seed) % 64 / 8;
  constexpr size_t ext_word = offsetof(XXH3_state_t, extSecret) % 64 / 8;
  static_assert(seed_word != ext_word);
  [[maybe_unused]] alignas(64) volatile uint64_t junk[2048];
  for (size_t i = 0; i < 2048; ++i)
    junk[i] = i % 8 == seed_word ? seed : i % 8 == ext_word ? 0 : 0x9e3779b97f4a7c15ull * (i + 1);
}
}  // namespace

TEST_CASE("payloads with the same header written back to back all carry their true checksum") {
  // Regression: the block-wise hash kept its XXH3 state on the stack without XXH3_INITSTATE, so a
  // seeded reset skipped deriving its secret when stale stack bytes held the same seed (as the
  // previous payload with this header leaves them), and the header got the checksum of garbage.
  PayloadHeader h;
  h.elements = 768;
  Bytes payload(kHeaderBytes + 768 * 4);
  const auto zeros = [](size_t, ByteSpan block) { std::memset(block.data(), 0, block.size()); };
  write_payload(h, payload, zeros);
  const uint64_t seed = XXH3_64bits(payload.data(), 32);  // the seed this header hashes with
  for (int i = 0; i < 20; ++i) {
    leave_stale_state(seed);
    write_payload(h, payload, zeros);
    REQUIRE_NOTHROW(parse_header(payload));
  }
}

TEST_CASE("fp32_body_view gives an fp32 payload's floats in place, or nothing where it cannot") {
  const auto values = test::gaussian(1000, 5);
  Bytes payload;
  make_codec("fp32")->encode(values, payload);
  const auto view = fp32_body_view(payload, values.size());
  REQUIRE(view.has_value());
  CHECK(static_cast<const void*>(view->data()) == payload.data() + kHeaderBytes);
  CHECK(std::equal(view->begin(), view->end(), values.begin(), values.end()));
  CHECK_FALSE(fp32_body_view(payload, values.size() - 1).has_value());  // not that many elements
  // A body that does not start on a float boundary is not viewed as floats.
  Bytes shifted(payload.size() + 1);
  std::memcpy(shifted.data() + 1, payload.data(), payload.size());
  const ConstByteSpan unaligned(shifted.data() + 1, payload.size());
  CHECK_FALSE(fp32_body_view(unaligned, values.size()).has_value());
}
