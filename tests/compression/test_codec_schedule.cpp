// CodecSchedule (compression/codec_schedule.hpp): parsing a spec or a list of phases, the
// errors that name the key and the phase, codec_at by round, and the ErrorFeedback switch that
// keeps the residual.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"

using namespace geotrain;
using namespace geotrain::compression;

namespace {

CodecSchedule parse_text(const std::string& yaml,
                         const std::string& key = "worker.critical_codec") {
  return CodecSchedule::parse(YamlReader("test.yaml"), YAML::Load(yaml), key);
}

}  // namespace

TEST_CASE("a codec spec is a schedule of one phase, for every round") {
  const auto s = parse_text("onebit:scale=rms");
  CHECK_FALSE(s.scheduled());
  CHECK(s.phases().size() == 1);
  for (uint64_t round : {0, 1, 7, 1000000}) CHECK(s.codec_at(round) == "onebit:scale=rms");
  CHECK(s.text() == "onebit:scale=rms");
  CHECK(s == CodecSchedule("onebit:scale=rms"));
  CHECK(CodecSchedule().codec_at(3) == "fp32");
}

TEST_CASE(
    "a phase with until_round N covers rounds up to and including N, the next starts at N+1") {
  const auto s = parse_text(
      "[{until_round: 10, codec: fp32}, {until_round: 20, codec: int8}, {codec: onebit}]");
  REQUIRE(s.scheduled());
  CHECK(s.codec_at(0) == "fp32");  // before the first round: the first phase
  CHECK(s.codec_at(1) == "fp32");
  CHECK(s.codec_at(10) == "fp32");
  CHECK(s.codec_at(11) == "int8");
  CHECK(s.codec_at(20) == "int8");
  CHECK(s.codec_at(21) == "onebit");
  CHECK(s.codec_at(UINT64_MAX) == "onebit");
  CHECK(s.phase_at(10) == 0);
  CHECK(s.phase_at(11) == 1);
  CHECK(s.phase_at(21) == 2);
  CHECK(s.text() == "fp32 until round 10, then int8 until round 20, then onebit");
  // Written back, it parses to the same schedule.
  CHECK(CodecSchedule::parse(YamlReader("x"), s.to_yaml(), "k") == s);
  CHECK(parse_text("[{codec: int8}]") == CodecSchedule("int8"));
}

TEST_CASE("fp32_from and lossy_from look at the phases from a round on") {
  const auto s = parse_text("[{until_round: 5, codec: fp32}, {codec: int8}]");
  CHECK(s.fp32_from(0));
  CHECK(s.fp32_from(5));
  CHECK_FALSE(s.fp32_from(6));
  CHECK(s.lossy_from(1));  // int8 comes later: a server keeps what it sent in the fp32 phase
  CHECK(s.lossy_from(6));
  const auto back = parse_text("[{until_round: 5, codec: onebit}, {codec: fp32}]");
  CHECK(back.lossy_from(5));
  CHECK_FALSE(back.lossy_from(6));
  CHECK_FALSE(CodecSchedule("fp32").lossy_from(0));
  CHECK_FALSE(CodecSchedule("fp32+zstd").fp32_from(0));  // zstd is not values as they are
}

TEST_CASE("bad schedules are input errors naming the source, the key and the phase") {
  auto bad = [](const std::string& yaml, const std::string& expected) {
    CHECK_THROWS_WITH_AS(parse_text(yaml), doctest::Contains(expected.c_str()), InputError);
  };
  bad("[]", "test.yaml: worker.critical_codec is an empty list");
  bad("[{until_round: 10, codec: int8}, {until_round: 20, codec: onebit}]",
      "worker.critical_codec[1] is the last phase and has until_round 20");
  bad("[{codec: int8}, {codec: onebit}]", "worker.critical_codec[0] has no until_round");
  bad("[{until_round: 10, codec: int8}, {until_round: 10, codec: int4}, {codec: onebit}]",
      "worker.critical_codec[1].until_round is 10, not after the previous phase's 10");
  bad("[{until_round: 10, codec: int8}, {until_round: 5, codec: int4}, {codec: onebit}]",
      "worker.critical_codec[1].until_round is 5");
  bad("[{until_round: 0, codec: int8}, {codec: onebit}]",
      "worker.critical_codec[0].until_round is 0: rounds are counted from 1");
  bad("[{until_round: -3, codec: int8}, {codec: onebit}]",
      "worker.critical_codec[0].until_round is '-3'");
  bad("[{until_round: 10, codec: int3}, {codec: onebit}]",
      "worker.critical_codec[0].codec: codec spec 'int3': unknown codec");
  bad("[{until_round: 10}, {codec: onebit}]", "worker.critical_codec[0] has no codec");
  bad("[{until_round: 10, codec: int8, level: 3}, {codec: onebit}]",
      "unknown key 'worker.critical_codec[0].level'");
  bad("[int8, onebit]", "'worker.critical_codec[0]' must be a mapping");
  bad("{codec: int8}", "worker.critical_codec must be a codec spec or a list of phases");
  bad("int3", "test.yaml: worker.critical_codec: codec spec 'int3': unknown codec");
  CHECK_THROWS_WITH_AS(
      CodecSchedule::from_phases({{std::nullopt, "int8"}, {std::nullopt, "onebit"}}, "codec"),
      doctest::Contains("codec[0] has no until_round"), InputError);
}

TEST_CASE("switching an ErrorFeedback's codec keeps the residual, which the new codec then sends") {
  ErrorFeedback ef(make_codec("int8"));
  std::vector<float> g(2048);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.37f * static_cast<float>(i));
  Bytes out;
  ef.encode(7, g, out);
  const std::vector<float> kept(ef.residual(7).begin(), ef.residual(7).end());
  bool some = false;
  for (float e : kept) some = some || e != 0.0f;
  REQUIRE(some);  // int8 leaves something to carry
  auto old = ef.set_codec(make_codec("onebit"));
  CHECK(old->id() == CodecId::int8);
  CHECK(ef.codec().id() == CodecId::onebit);
  REQUIRE(ef.residual(7).size() == kept.size());
  CHECK(std::equal(kept.begin(), kept.end(), ef.residual(7).begin()));
  // The next encode is the reference order with the kept residual: x = g + e, c = onebit(x).
  std::vector<float> x(g.size()), d(g.size());
  for (size_t i = 0; i < g.size(); ++i) x[i] = g[i] + kept[i];
  Bytes expected;
  make_codec("onebit")->encode(x, expected);
  ef.encode(7, g, out);
  CHECK(out == expected);
  CHECK(parse_header(out).codec == CodecId::onebit);

  // move_residual: to another ErrorFeedback, leaving none here.
  ErrorFeedback other(make_codec("fp32"));
  const std::vector<float> now(ef.residual(7).begin(), ef.residual(7).end());
  ef.move_residual(7, other);
  CHECK(ef.residual(7).empty());
  CHECK(std::equal(now.begin(), now.end(), other.residual(7).begin()));
  ef.move_residual(7, other);  // none here: none there after
  CHECK(other.residual(7).empty());
}
