// powersgd: rank-r factors of a matrix, with a warm-started Q per stream, error feedback, a
// fallback codec for spans that are not matrices, and a decoder that checks every field.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "compression/codecs.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;
using geotrain::test::poke;
using geotrain::test::reseal;

namespace {

// Column k of the orthonormal DCT-II basis of R^n: a closed-form orthonormal set.
double dct(size_t n, size_t k, size_t i) {
  const double scale = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
  return scale * std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) *
                          static_cast<double>(k) / static_cast<double>(n));
}

// rows x cols = sum_k s[k] u_k v_k^T with u_k, v_k DCT basis vectors (u_k = dct(rows, 2k+1),
// v_k = dct(cols, k+1)): its singular values are s, exactly.
std::vector<float> with_singular_values(size_t rows, size_t cols, const std::vector<double>& s) {
  std::vector<float> m(rows * cols);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) {
      double v = 0.0;
      for (size_t k = 0; k < s.size(); ++k)
        v += s[k] * dct(rows, 2 * k + 1, i) * dct(cols, k + 1, j);
      m[i * cols + j] = static_cast<float>(v);
    }
  return m;
}

double frobenius(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

// p, resealed (so that the field itself must be caught), is refused naming `needle`, and an
// output of n elements stays as it was.
void refused(Bytes p, size_t n, const std::string& needle) {
  reseal(p);
  std::vector<float> y(n, -7.25f);
  CHECK_THROWS_WITH_AS(decode_payload(p, y), doctest::Contains(needle.c_str()), InputError);
  for (float v : y) REQUIRE(v == -7.25f);
}

std::vector<float> decoded(ConstByteSpan payload, size_t n) {
  std::vector<float> y(n, 123.0f);
  decode_payload(payload, y);
  return y;
}

}  // namespace

TEST_CASE("powersgd: a matrix of rank at most r comes back whole from one encode") {
  // 60 x 40 of rank 3: A B^T.
  const auto a = test::gaussian(60 * 3, 1), b = test::gaussian(40 * 3, 2);
  std::vector<float> m(60 * 40, 0.0f);
  for (size_t i = 0; i < 60; ++i)
    for (size_t j = 0; j < 40; ++j)
      for (size_t k = 0; k < 3; ++k) m[i * 40 + j] += a[i * 3 + k] * b[j * 3 + k];
  for (uint32_t rank : {3u, 4u}) {
    CAPTURE(rank);
    auto codec = make_powersgd_codec({.rank = rank});
    Bytes p;
    codec->encode_matrix(m, {60, 40}, 0, p);
    const auto y = decoded(p, m.size());
    CHECK(frobenius(y, m) <= 1e-5 * frobenius(m, std::vector<float>(m.size(), 0.0f)));
    CHECK(p.size() == kHeaderBytes + 4 * rank * (60 + 40));
    const PayloadHeader h = parse_header(p);
    CHECK(h.codec == CodecId::powersgd);
    CHECK(h.chunk == 40);
    CHECK(h.aux == rank);
    CHECK(h.elements == 60 * 40);
  }
}

TEST_CASE("powersgd: repeated encodes of one stream converge to the best rank-r approximation") {
  // Singular values 8, 4, 2, 1, 0.5: the best rank-2 error is sqrt(2^2 + 1 + 0.25) (Eckart-Young).
  const std::vector<double> s = {8, 4, 2, 1, 0.5};
  const auto m = with_singular_values(48, 32, s);
  const double best = std::sqrt(4.0 + 1.0 + 0.25);
  auto codec = make_powersgd_codec({.rank = 2, .seed = 5});
  double first = 0.0, last = 0.0;
  for (int round = 0; round < 12; ++round) {
    Bytes p;
    codec->encode_matrix(m, {48, 32}, 7, p);
    const double error = frobenius(decoded(p, m.size()), m);
    if (round == 0) first = error;
    last = error;
  }
  CHECK(last >= best * (1 - 1e-4));  // nothing beats the best rank-2 approximation
  CHECK(last <= best * 1.001);
  CHECK(first >= last);
  // Another stream of the same codec starts from its own Q: its first error is the first one.
  Bytes p;
  auto fresh = make_powersgd_codec({.rank = 2, .seed = 5});
  fresh->encode_matrix(m, {48, 32}, 7, p);
  CHECK(frobenius(decoded(p, m.size()), m) == doctest::Approx(first).epsilon(1e-6));
}

TEST_CASE("powersgd: the rank is capped at the smaller side; P's columns are orthonormal") {
  const auto m = test::gaussian(2 * 100, 3);
  auto codec = make_powersgd_codec({.rank = 4});
  Bytes p;
  codec->encode_matrix(m, {2, 100}, 0, p);
  CHECK(parse_header(p).aux == 2);
  CHECK(p.size() == kHeaderBytes + 4 * 2 * (2 + 100));
  // Rank 2 of a 2-row matrix is the matrix.
  CHECK(frobenius(decoded(p, m.size()), m) <= 1e-4);
  // P (2 x 2) orthonormal.
  const auto* pf = reinterpret_cast<const float*>(p.data() + kHeaderBytes);
  CHECK(pf[0] * pf[0] + pf[2] * pf[2] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(pf[0] * pf[1] + pf[2] * pf[3] == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("powersgd: a span that is not a matrix goes through the named fallback codec") {
  const auto x = test::gaussian(300, 4);
  for (auto [fallback, id] :
       {std::pair{"fp16", CodecId::fp16}, std::pair{"onebit", CodecId::onebit},
        std::pair{"fp32", CodecId::fp32}}) {
    CAPTURE(fallback);
    auto codec = make_codec(std::string("powersgd:fallback=") + fallback);
    Bytes a, b;
    codec->encode(x, a);
    codec->encode_matrix(x, {}, 0, b);  // no shape: the same
    CHECK(parse_header(a).codec == id);
    CHECK(a == b);
    Bytes direct;
    make_codec(fallback)->encode(x, direct);
    CHECK(a == direct);
    std::vector<float> y(x.size());
    codec->decode(a, y);
    CHECK(y == decoded(direct, x.size()));
  }
}

TEST_CASE("powersgd with error feedback: what was sent plus the residual is what was given") {
  ErrorFeedback ef(make_codec("powersgd:rank=2"));
  std::vector<double> given(24 * 16, 0.0), sent(24 * 16, 0.0);
  for (unsigned round = 0; round < 6; ++round) {
    const auto g = test::gaussian(24 * 16, 10 + round);
    Bytes p;
    ef.encode(3, g, p, {24, 16});
    CHECK(parse_header(p).codec == CodecId::powersgd);
    CHECK(p.size() == kHeaderBytes + 4 * 2 * (24 + 16));
    const auto y = decoded(p, g.size());
    for (size_t i = 0; i < g.size(); ++i) given[i] += g[i], sent[i] += y[i];
  }
  const auto e = ef.residual(3);
  for (size_t i = 0; i < given.size(); ++i)
    REQUIRE(sent[i] + e[i] == doctest::Approx(given[i]).epsilon(1e-4));
  // Without a shape the same ErrorFeedback takes the fallback's path (fp16): a stream of its own.
  Bytes flat;
  ef.encode(4, test::gaussian(50, 99), flat);
  CHECK(parse_header(flat).codec == CodecId::fp16);
}

TEST_CASE("powersgd: same seed, same bytes; another seed, another start") {
  const auto m = test::gaussian(30 * 20, 6);
  Bytes a, b, c;
  make_codec("powersgd:rank=3,seed=1")->encode_matrix(m, {30, 20}, 2, a);
  make_codec("powersgd:rank=3,seed=1")->encode_matrix(m, {30, 20}, 2, b);
  make_codec("powersgd:rank=3,seed=2")->encode_matrix(m, {30, 20}, 2, c);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("powersgd: a zero matrix sends zeros, and the next matrix starts from a fresh Q") {
  auto codec = make_powersgd_codec({.rank = 2});
  const std::vector<float> zero(20 * 10, 0.0f);
  Bytes p;
  codec->encode_matrix(zero, {20, 10}, 0, p);
  for (float v : decoded(p, zero.size())) REQUIRE(v == 0.0f);
  CHECK(codec->stream_states().at(0) == std::vector<float>(10 * 2, 0.0f));
  // Rank 1: a zero Q would send zeros forever; it is drawn again.
  std::vector<float> m(20 * 10);
  for (size_t i = 0; i < 20; ++i)
    for (size_t j = 0; j < 10; ++j) m[i * 10 + j] = float(i + 1) * float(j % 3 + 1);
  codec->encode_matrix(m, {20, 10}, 0, p);
  CHECK(frobenius(decoded(p, m.size()), m) <= 1e-4 * frobenius(m, zero));
}

TEST_CASE("powersgd: a stream's Q is its state; restored, the next encode is the same bytes") {
  const auto m1 = test::gaussian(16 * 12, 7), m2 = test::gaussian(16 * 12, 8);
  auto codec = make_powersgd_codec({.rank = 3});
  Bytes p;
  codec->encode_matrix(m1, {16, 12}, 9, p);
  const auto states = codec->stream_states();
  REQUIRE(states.size() == 1);
  CHECK(states.at(9).size() == 12 * 3);

  auto restored = make_powersgd_codec({.rank = 3});
  restored->restore_stream_state(9, {16, 12}, states.at(9));
  Bytes a, b;
  codec->encode_matrix(m2, {16, 12}, 9, a);
  restored->encode_matrix(m2, {16, 12}, 9, b);
  CHECK(a == b);

  // A state of the wrong size is refused, and the stream keeps its own.
  const auto before = restored->stream_states();
  CHECK_THROWS_WITH_AS(restored->restore_stream_state(9, {16, 12}, std::vector<float>(5)),
                       doctest::Contains("the state of stream 9 has 5 values"), InputError);
  CHECK(restored->stream_states() == before);
  // A codec that keeps no state takes none.
  CHECK_THROWS_WITH_AS(make_codec("onebit")->restore_stream_state(1, {}, std::vector<float>(3)),
                       doctest::Contains("keeps no state"), InputError);
}

TEST_CASE("powersgd+zstd: the zstd stage passes the shape on, and wraps the fallback's payload") {
  const auto m = test::gaussian(40 * 30, 11);
  auto stage = make_codec("powersgd:rank=2+zstd");
  CHECK(stage->uses_shape());
  Bytes packed, plain;
  stage->encode_matrix(m, {40, 30}, 0, packed);
  make_codec("powersgd:rank=2")->encode_matrix(m, {40, 30}, 0, plain);
  CHECK(parse_header(packed).aux == static_cast<uint32_t>(CodecId::powersgd));
  CHECK(decoded(packed, m.size()) == decoded(plain, m.size()));
  Bytes flat;
  stage->encode(m, flat);
  CHECK(parse_header(flat).aux == static_cast<uint32_t>(CodecId::fp16));
  std::vector<float> y(m.size());
  stage->decode(flat, y);
  Bytes fp16;
  make_codec("fp16")->encode(m, fp16);
  CHECK(y == decoded(fp16, m.size()));
}

TEST_CASE("powersgd payloads with a wrong field are refused before anything is written") {
  const auto m = test::gaussian(8 * 6, 12);
  Bytes clean;
  make_codec("powersgd:rank=2")->encode_matrix(m, {8, 6}, 0, clean);
  auto rejected = [&](Bytes p, const std::string& needle) { refused(p, m.size(), needle); };
  {
    Bytes p = clean;
    poke<uint32_t>(p, 12, 7);  // rank 7 > 6 columns
    rejected(p, "rank 7 is invalid for a 8 x 6 matrix");
  }
  {
    Bytes p = clean;
    poke<uint32_t>(p, 12, 0);
    rejected(p, "rank 0 is invalid");
  }
  {
    Bytes p = clean;
    poke<uint32_t>(p, 8, 5);  // 48 elements are not rows of 5
    rejected(p, "48 elements are not a matrix of 5 columns");
  }
  {
    Bytes p = clean;
    poke<uint32_t>(p, 8, 0);
    rejected(p, "not a matrix of 0 columns");
  }
  {
    Bytes p = clean;
    poke<uint32_t>(p, 8, 8);  // 6 x 8 needs 4 * 2 * 14 bytes, as 8 x 6 does: rank 1 does not
    poke<uint32_t>(p, 12, 1);
    rejected(p, "body is 112 bytes, but a 6 x 8 matrix at rank 1 needs 56");
  }
  {
    Bytes p = clean;
    p.resize(p.size() - 4);
    rejected(p, "body is 108 bytes");
  }
}

TEST_CASE("powersgd specs: options, the canonical spec, and refusals naming what is allowed") {
  CHECK(make_codec("powersgd")->spec() == "powersgd:rank=4,fallback=fp16");
  CHECK(make_codec("powersgd:rank=16,fallback=onebit,seed=3")->spec() ==
        "powersgd:rank=16,fallback=onebit,seed=3");
  CHECK(make_codec("powersgd:rank=8+zstd")->spec() == "powersgd:rank=8,fallback=fp16+zstd:level=3");
  const CodecSettings s = parse_codec_spec("powersgd:rank=8,fallback=int8");
  CHECK(s.id == CodecId::powersgd);
  CHECK(s.powersgd.rank == 8);
  CHECK(s.powersgd.fallback == CodecId::int8);
  CHECK(make_codec("powersgd")->uses_shape());
  CHECK_FALSE(make_codec("onebit")->uses_shape());
  CHECK(CodecSchedule("powersgd:rank=2").uses_shapes());
  CHECK_FALSE(CodecSchedule("int4+zstd").uses_shapes());
  CHECK_THROWS_WITH_AS(make_codec("powersgd:rank=0"), doctest::Contains("rank 0 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("powersgd:rank=257"), doctest::Contains("must be in [1, 256]"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("powersgd:fallback=topk"),
                       doctest::Contains("fallback=topk is invalid for powersgd (allowed: fp32"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("powersgd:chunk=64"),
                       doctest::Contains("unknown option 'chunk' for powersgd"), InputError);
}

TEST_CASE(
    "powersgd pieces: a shard's matrices factorised and its vectors in the fallback, in one "
    "payload") {
  // A 12 x 8 matrix of rank 1, 5 vector elements, a 6 x 4 matrix of rank 2.
  std::vector<float> x(96 + 5 + 24);
  for (size_t i = 0; i < 12; ++i)
    for (size_t j = 0; j < 8; ++j) x[i * 8 + j] = 0.1f * float(i + 1) * float(int(j) - 3);
  for (size_t k = 0; k < 5; ++k) x[96 + k] = 1.0f + 0.001f * float(k);
  const auto a = test::gaussian(6 * 2, 21), b = test::gaussian(4 * 2, 22);
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < 4; ++j)
      x[101 + i * 4 + j] = a[i * 2] * b[j * 2] + a[i * 2 + 1] * b[j * 2 + 1];
  const std::vector<SpanPiece> pieces = {{96, {12, 8}}, {5, {}}, {24, {6, 4}}};
  auto codec = make_codec("powersgd:rank=2");
  Bytes p;
  codec->encode_pieces(x, pieces, 3, p);
  const PayloadHeader h = parse_header(p);
  CHECK(h.codec == CodecId::powersgd);
  CHECK(h.version == 2);
  CHECK(h.elements == x.size());
  // Table (8 + 3 x 16), two factor payloads, one fp16 payload.
  CHECK(p.size() == kHeaderBytes + 8 + 48 + (40 + 4 * 2 * 20) + (40 + 10) + (40 + 4 * 2 * 10));
  const auto y = decoded(p, x.size());
  for (size_t i = 0; i < 96; ++i) REQUIRE(y[i] == doctest::Approx(x[i]).epsilon(1e-5));
  for (size_t k = 96; k < 101; ++k) REQUIRE(std::abs(y[k] - x[k]) <= 1e-3f);  // fp16
  for (size_t i = 101; i < x.size(); ++i) REQUIRE(std::abs(y[i] - x[i]) <= 1e-5f);
  std::vector<float> acc(x.size(), 1.0f);
  codec->decode_add(p, acc);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(acc[i] == 1.0f + y[i]);

  // With error feedback (the server's downlink): what was sent plus the residual is what was
  // given, over rounds; the stream's reset forgets its Qs (the next encode is a fresh codec's).
  ErrorFeedback ef(make_codec("powersgd:rank=1"));
  std::vector<double> given(x.size(), 0.0), sent(x.size(), 0.0);
  for (unsigned round = 0; round < 4; ++round) {
    const auto g = test::gaussian(x.size(), 30 + round);
    Bytes q;
    ef.encode(2, g, q, pieces);
    const auto d = decoded(q, g.size());
    for (size_t i = 0; i < g.size(); ++i) given[i] += g[i], sent[i] += d[i];
  }
  const auto e = ef.residual(2);
  for (size_t i = 0; i < given.size(); ++i)
    REQUIRE(sent[i] + e[i] == doctest::Approx(given[i]).epsilon(1e-4));
  ef.reset(2);
  Bytes after, fresh;
  ef.encode(2, x, after, pieces);
  ErrorFeedback(make_codec("powersgd:rank=1")).encode(2, x, fresh, pieces);
  CHECK(after == fresh);
  // A codec without shapes ignores the pieces.
  Bytes flat, direct;
  ErrorFeedback(make_codec("onebit")).encode(0, x, flat, pieces);
  make_codec("onebit")->encode(x, direct);
  CHECK(flat == direct);
  // Pieces that do not cover the span are refused.
  const std::vector<SpanPiece> short_pieces = {{96, {12, 8}}};
  CHECK_THROWS_WITH_AS(codec->encode_pieces(x, short_pieces, 0, p),
                       doctest::Contains("the pieces hold 96 elements, the span 125"), InputError);
}

TEST_CASE(
    "powersgd pieces payloads with a wrong table or piece are refused before anything is "
    "written") {
  std::vector<float> x = test::gaussian(4 * 4 + 3, 23);
  const std::vector<SpanPiece> pieces = {{16, {4, 4}}, {3, {}}};
  Bytes clean;
  make_codec("powersgd:rank=2")->encode_pieces(x, pieces, 0, clean);
  const size_t table = kHeaderBytes + 8;  // the first piece's entry
  auto rejected = [&](Bytes p, const std::string& needle) { refused(p, x.size(), needle); };
  {
    Bytes p = clean;
    poke<uint32_t>(p, kHeaderBytes, 0);
    rejected(p, "0 pieces (allowed: 1 to 65536)");
  }
  {
    Bytes p = clean;
    poke<uint64_t>(p, table, 17);  // the first piece claims 17 elements: 17 + 3 != 19
    rejected(p, "holds 16 elements, but the output has 17");
  }
  {
    Bytes p = clean;
    poke<uint64_t>(p, table + 8, 1u << 20);  // its bytes run past the payload
    rejected(p, "runs past the payload");
  }
  {
    Bytes p = clean;
    // The second piece's payload (fp16 of 3) garbled: its own checksum fails.
    p[p.size() - 1] ^= std::byte{0x40};
    rejected(p, "checksum");
  }
  {
    Bytes p = clean;
    p.push_back(std::byte{0});  // a byte past the last piece
    rejected(p, "the payload holds 19");
  }
  {
    Bytes p = clean;
    poke<uint32_t>(p, 12, 2);  // aux must be 0 in version 2
    rejected(p, "chunk 0 and aux 2, must be 0");
  }
  // A version-2 payload nested in one is not a piece.
  Bytes nested;
  const std::vector<SpanPiece> one = {{16, {4, 4}}};
  make_codec("powersgd:rank=2")->encode_pieces(ConstFloatSpan(x).first(16), one, 0, nested);
  Bytes outer(kHeaderBytes + 8 + 16 + nested.size());
  poke<uint32_t>(outer, kHeaderBytes, 1);
  poke<uint64_t>(outer, kHeaderBytes + 8, 16);
  poke<uint64_t>(outer, kHeaderBytes + 16, nested.size());
  std::memcpy(outer.data() + kHeaderBytes + 24, nested.data(), nested.size());
  PayloadHeader h;
  h.codec = CodecId::powersgd;
  h.version = 2;
  h.elements = 16;
  write_header(h, outer);
  std::vector<float> y(16, -7.25f);
  CHECK_THROWS_WITH_AS(decode_payload(outer, y),
                       doctest::Contains("piece 0 is powersgd, not a matrix's factors"),
                       InputError);
}

TEST_CASE("powersgd's size bound holds for a payload of many small pieces, through zstd too") {
  // The worst case per element: one-element pieces through onebit (a scale and a word each), and
  // 1 x 1 matrices (two factors).
  std::vector<SpanPiece> pieces;
  for (size_t k = 0; k < 60; ++k) pieces.push_back(k % 2 ? SpanPiece{1, {}} : SpanPiece{1, {1, 1}});
  const auto x = test::gaussian(pieces.size(), 40);
  auto codec = make_codec("powersgd:rank=4,fallback=onebit");
  Bytes p;
  codec->encode_pieces(x, pieces, 0, p);
  CHECK(p.size() <= codec->max_payload_bytes(x.size()));
  CHECK(p.size() > kHeaderBytes + 14 * x.size() + 64);  // past what other codecs may take
  auto stage = make_codec("powersgd:rank=4,fallback=onebit+zstd:level=1");
  Bytes packed;
  stage->encode_pieces(x, pieces, 0, packed);
  std::vector<float> y(x.size());
  stage->decode(packed, y);  // the zstd stage's bound lets it through
  CHECK(y == decoded(p, x.size()));
}
