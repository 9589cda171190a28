#include <doctest/doctest.h>

#include <string>

#include "core/error.hpp"
#include "launcher/report/run_summary.hpp"
#include "server/config.hpp"

using namespace geotrain;

namespace {
const char* kBase = R"(
regions: [us, eu]
model:
  tensors: [{name: w, size: 4096}]
)";
}

TEST_CASE("a server config parses its keys and defaults") {
  auto cfg = server::parse_server_config(std::string(kBase) + R"(
server:
  endpoints: {us: "tcp://127.0.0.1:7101"}
  staleness_bound: 3
  staleness_weighting: inverse
  optimizer: {lr: 0.7, momentum: 0.9, nesterov: true}
  downlink_codec: "int8:chunk=256"
  checkpoint: {every: 10, keep: 4}
)");
  CHECK(cfg.regions == std::vector<std::string>{"us", "eu"});
  CHECK(cfg.shard.staleness_bound == 3);
  CHECK(cfg.shard.weighting == server::StalenessWeighting::inverse);
  CHECK(cfg.shard.optimizer.lr == 0.7f);
  CHECK(cfg.shard.optimizer.nesterov);
  CHECK(cfg.checkpoint.every == 10);
  CHECK(cfg.endpoints.at("us") == "tcp://127.0.0.1:7101");
  CHECK(cfg.chunk == 1024);
  CHECK(cfg.region_index("eu") == 1);
  CHECK_THROWS_WITH_AS(cfg.region_index("ap"), doctest::Contains("us, eu"), InputError);
}

TEST_CASE("server.shards_per_region: one count for every region, or a count per region") {
  const auto parse = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section);
  };
  CHECK(server::parse_server_config(kBase).shards_per_region == std::vector<uint32_t>{1, 1});
  CHECK(parse("  shards_per_region: 2\n").shards_per_region == std::vector<uint32_t>{2, 2});
  const auto placed = parse("  shards_per_region: {us: 1, eu: 5}\n");
  CHECK(placed.shards_per_region == std::vector<uint32_t>{1, 5});
  // The shard layout is part of the servers' state: a checkpoint of another layout is refused.
  CHECK(placed.state_hash(7) != parse("  shards_per_region: 1\n").state_hash(7));
  CHECK(parse("  shards_per_region: {us: 2, eu: 2}\n").state_hash(7) ==
        parse("  shards_per_region: 2\n").state_hash(7));
  CHECK_THROWS_WITH_AS(parse("  shards_per_region: {us: 1}\n"),
                       doctest::Contains("server.shards_per_region has no value for region 'eu'"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("  shards_per_region: {us: 1, eu: 2000}\n"),
                       doctest::Contains("server.shards_per_region.eu"), InputError);
}

TEST_CASE("config errors name the key, the value and what is allowed") {
  auto bad = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section);
  };
  CHECK_THROWS_WITH_AS(bad("  stalenes_bound: 2\n"),
                       doctest::Contains("unknown key 'server.stalenes_bound'"), InputError);
  CHECK_THROWS_WITH_AS(bad("  staleness_bound: -1\n"), doctest::Contains("server.staleness_bound"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("  staleness_weighting: linear\n"),
                       doctest::Contains("allowed: none, inverse"), InputError);
  CHECK_THROWS_WITH_AS(bad("  downlink_codec: int9\n"), doctest::Contains("server.downlink_codec"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("  endpoints: {mars: \"tcp://x:1\"}\n"),
                       doctest::Contains("server.endpoints.mars"), InputError);
  CHECK_THROWS_WITH_AS(bad("  optimizer: {momentum: 1.5}\n"),
                       doctest::Contains("server.optimizer.momentum is 1.5"), InputError);
  CHECK_THROWS_WITH_AS(server::parse_server_config("regions: [a]\n"),
                       doctest::Contains("'model' is missing"), InputError);
  CHECK_THROWS_WITH_AS(server::parse_server_config("regions: [a]\nmodle: {}\n"),
                       doctest::Contains("unknown key 'modle'"), InputError);
}

TEST_CASE("start-up and per-region downlink keys parse, and their errors name the key") {
  auto cfg = server::parse_server_config(std::string(kBase) + R"(
server:
  wait_for_all_regions: false
  join_within_ms: 300000
  downlink_codec: int8
  downlink_codecs: {eu: onebit}
)");
  CHECK_FALSE(cfg.wait_for_all_regions);
  CHECK(cfg.join_within == std::chrono::milliseconds(300000));
  CHECK(server::parse_server_config(kBase).join_within == std::chrono::milliseconds(120000));
  CHECK(cfg.shard.downlink_schedule(0) == compression::CodecSchedule("int8"));
  CHECK(cfg.shard.downlink_schedule(1) == compression::CodecSchedule("onebit"));
  CHECK(server::parse_server_config(kBase).wait_for_all_regions);
  auto bad = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section);
  };
  CHECK_THROWS_WITH_AS(bad("  downlink_codecs: {mars: onebit}\n"),
                       doctest::Contains("server.downlink_codecs.mars"), InputError);
  CHECK_THROWS_WITH_AS(bad("  downlink_codecs: {eu: int9}\n"),
                       doctest::Contains("server.downlink_codecs.eu"), InputError);
  // powersgd on the downlink needs the tensors' columns, which these model.tensors do not give.
  CHECK_THROWS_WITH_AS(bad("  downlink_codec: \"powersgd:rank=4\"\n"),
                       doctest::Contains("server.downlink_codec is 'powersgd:rank=4': powersgd "
                                         "factorises matrices, but model.tensors gives no tensor's "
                                         "columns"),
                       InputError);
  CHECK_THROWS_WITH_AS(
      bad("  downlink_codecs: {eu: [{until_round: 3, codec: int8}, {codec: powersgd}]}\n"),
      doctest::Contains("server.downlink_codecs.eu is"), InputError);
  // With the columns given, it is taken; cols must divide the size.
  const auto shaped = server::parse_server_config(R"(
regions: [us, eu]
model:
  tensors: [{name: w, size: 4096, cols: 64}, {name: b, size: 64}]
server:
  downlink_codec: "powersgd:rank=4"
)");
  CHECK(shaped.tensors[0].cols == 64);
  CHECK(shaped.tensors[1].cols == 0);
  CHECK_THROWS_WITH_AS(server::parse_server_config(R"(
regions: [us, eu]
model:
  tensors: [{name: w, size: 4096, cols: 100}]
)"),
                       doctest::Contains("'w' of size 4096 is not a matrix of 100 columns"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("  wait_for_all_regions: maybe\n"),
                       doctest::Contains("server.wait_for_all_regions"), InputError);
  CHECK_THROWS_WITH_AS(bad("  join_within_ms: 0\n"), doctest::Contains("server.join_within_ms"),
                       InputError);
}

TEST_CASE("downlink codecs take schedules by round, per region too, with errors naming the phase") {
  auto cfg = server::parse_server_config(std::string(kBase) + R"(
server:
  downlink_codec: [{until_round: 10, codec: fp32}, {codec: onebit}]
  downlink_codecs: {eu: [{until_round: 3, codec: int8}, {codec: "onebit:scale=rms"}]}
)");
  const auto& all = cfg.shard.downlink_schedule(0);
  CHECK(all.codec_at(10) == "fp32");
  CHECK(all.codec_at(11) == "onebit");
  const auto& eu = cfg.shard.downlink_schedule(1);
  CHECK(eu.codec_at(3) == "int8");
  CHECK(eu.codec_at(4) == "onebit:scale=rms");
  auto bad = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section);
  };
  CHECK_THROWS_WITH_AS(bad("  downlink_codec: [{until_round: 10, codec: int8}, {until_round: 20, "
                           "codec: onebit}]\n"),
                       doctest::Contains("server.downlink_codec[1] is the last phase"), InputError);
  CHECK_THROWS_WITH_AS(
      bad("  downlink_codecs: {eu: [{until_round: 3, codec: int9}, {codec: onebit}]}\n"),
      doctest::Contains("server.downlink_codecs.eu[0].codec: codec spec 'int9'"), InputError);
}

TEST_CASE("server.downlink_error_feedback.decay parses, defaults to 1, and refuses 0 and 1.5") {
  CHECK(server::parse_server_config(kBase).shard.downlink_feedback_decay == 1.0f);
  auto cfg = server::parse_server_config(std::string(kBase) + R"(
server:
  downlink_codec: onebit
  downlink_error_feedback: {decay: 0.5}
)");
  CHECK(cfg.shard.downlink_feedback_decay == 0.5f);
  auto bad = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section, "s.yaml");
  };
  CHECK_THROWS_WITH_AS(bad("  downlink_error_feedback: {decay: 0}\n"),
                       doctest::Contains("s.yaml: server.downlink_error_feedback.decay is 0, "
                                         "allowed: (0, 1]"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("  downlink_error_feedback: {decay: 1.5}\n"),
                       doctest::Contains("server.downlink_error_feedback.decay is 1.5"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("  downlink_error_feedback: {beta: 0.5}\n"),
                       doctest::Contains("unknown key 'server.downlink_error_feedback.beta' "
                                         "(allowed: decay)"),
                       InputError);
}

TEST_CASE("server.consistency parses the quorum policy, its defaults, and counts or fractions") {
  const std::string three = R"(
regions: [us, eu, ap]
model:
  tensors: [{name: w, size: 4096}]
)";
  auto parse = [&](const std::string& consistency) {
    return server::parse_server_config(three + "server:\n  consistency: " + consistency + "\n")
        .shard.consistency;
  };
  // No consistency section: today's ssp, every delta weighted equally.
  const auto ssp = server::parse_server_config(three).shard.consistency;
  CHECK(ssp.policy == server::ConsistencyPolicy::ssp);
  CHECK(ssp.weighting == server::MergeWeighting::equal);
  CHECK(parse("{policy: ssp, weighting: tokens}").weighting == server::MergeWeighting::tokens);

  const auto q = parse("{policy: quorum, quorum: 2, grace_ms: 250, weighting: equal}");
  CHECK(q.policy == server::ConsistencyPolicy::quorum);
  CHECK(q.quorum == 2);
  CHECK(q.grace == std::chrono::milliseconds(250));
  CHECK(q.weighting == server::MergeWeighting::equal);
  // Defaults under quorum: a majority of the regions, 500 ms, token weights.
  const auto d = parse("{policy: quorum}");
  CHECK(d.quorum == 2);
  CHECK(d.grace == std::chrono::milliseconds(500));
  CHECK(d.weighting == server::MergeWeighting::tokens);
  // A fraction of the 3 regions is the nearest count: 0.67 -> 2, 1.0 -> 3, 0.1 -> 1 (at least 1).
  CHECK(parse("{policy: quorum, quorum: 0.67}").quorum == 2);
  CHECK(parse("{policy: quorum, quorum: 1.0}").quorum == 3);
  CHECK(parse("{policy: quorum, quorum: 0.1}").quorum == 1);
  // The ssp keys stay where they are, and mean what they meant.
  auto both = server::parse_server_config(
      three + "server:\n  staleness_bound: 2\n  consistency: {policy: quorum}\n");
  CHECK(both.shard.staleness_bound == 2);
}

TEST_CASE("server.consistency errors name the key, the value and what is allowed") {
  auto bad = [](const std::string& consistency) {
    return server::parse_server_config(std::string(kBase) +  // regions us, eu
                                       "server:\n  consistency: " + consistency + "\n");
  };
  CHECK_THROWS_WITH_AS(bad("{policy: paxos}"),
                       doctest::Contains("server.consistency.policy is 'paxos', allowed: ssp, "
                                         "quorum"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, grace: 5}"),
                       doctest::Contains("unknown key 'server.consistency.grace'"), InputError);
  CHECK_THROWS_WITH_AS(
      bad("{policy: quorum, quorum: 3}"),
      doctest::Contains("server.consistency.quorum (regions) is 3, allowed: [1, 2]"), InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, quorum: 0}"),
                       doctest::Contains("server.consistency.quorum (regions) is 0"), InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, quorum: 1.5}"),
                       doctest::Contains("server.consistency.quorum (a fraction) is 1.5"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, quorum: 0.0}"),
                       doctest::Contains("allowed: a fraction in (0, 1]"), InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, quorum: most}"),
                       doctest::Contains("server.consistency.quorum (regions) is 'most'"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, grace_ms: -1}"),
                       doctest::Contains("server.consistency.grace_ms is -1"), InputError);
  CHECK_THROWS_WITH_AS(bad("{policy: quorum, weighting: samples}"),
                       doctest::Contains("server.consistency.weighting is 'samples', allowed: "
                                         "tokens, equal"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("{quorum: 2}"),
                       doctest::Contains("server.consistency.quorum is set but "
                                         "server.consistency.policy is 'ssp'"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("{staleness_bound: 2}"), doctest::Contains("set server.staleness_bound"),
                       InputError);
  CHECK_THROWS_WITH_AS(bad("quorum"), doctest::Contains("'server.consistency' must be a mapping"),
                       InputError);
}

// Regression (fuzz/corpus/server_config/crash-complex-key.yaml): escaped as a yaml-cpp exception.
TEST_CASE("a server config with a key that is not a plain name gets an InputError") {
  CHECK_THROWS_WITH_AS(
      geotrain::server::parse_server_config("? [a, b]\n: 1\nregions: [us-east]\n", "c.yaml"),
      doctest::Contains("not a plain name"), geotrain::InputError);
}

TEST_CASE("the report's text for a default server.optimizer is what the server defaults to") {
  const std::string endpoint = "server:\n  endpoints: {us: \"tcp://127.0.0.1:7101\"}\n";
  const auto dflt = server::parse_server_config(std::string(kBase) + endpoint);
  const auto said = server::parse_server_config(std::string(kBase) + endpoint + "  optimizer: " +
                                                launcher::kDefaultOuterOptimizerText + "\n");
  CHECK(said.shard.optimizer.lr == dflt.shard.optimizer.lr);
  CHECK(said.shard.optimizer.momentum == dflt.shard.optimizer.momentum);
  CHECK(said.shard.optimizer.nesterov == dflt.shard.optimizer.nesterov);
}
