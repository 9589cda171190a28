#include <doctest/doctest.h>

#include "core/error.hpp"
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
  downlink_codec: int8
  downlink_codecs: {eu: onebit}
)");
  CHECK_FALSE(cfg.wait_for_all_regions);
  CHECK(cfg.shard.downlink_spec(0) == "int8");
  CHECK(cfg.shard.downlink_spec(1) == "onebit");
  CHECK(server::parse_server_config(kBase).wait_for_all_regions);
  auto bad = [](const std::string& server_section) {
    return server::parse_server_config(std::string(kBase) + "server:\n" + server_section);
  };
  CHECK_THROWS_WITH_AS(bad("  downlink_codecs: {mars: onebit}\n"),
                       doctest::Contains("server.downlink_codecs.mars"), InputError);
  CHECK_THROWS_WITH_AS(bad("  downlink_codecs: {eu: int9}\n"),
                       doctest::Contains("server.downlink_codecs.eu"), InputError);
  CHECK_THROWS_WITH_AS(bad("  wait_for_all_regions: maybe\n"),
                       doctest::Contains("server.wait_for_all_regions"), InputError);
}
