// Shard placement from a WAN profile's links (launcher/run/shard_placement.hpp): the modelled
// exchange of a synchronous round in closed form, and the search for the best counts; and
// `geotrain place` as a user runs it.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "launcher/run/shard_placement.hpp"
#include "netsim/config.hpp"
#include "tests/run_binary.hpp"

using namespace geotrain;

namespace {
// a-b and b-c at 80 Mbit/s (10 MB/s), a-c at 20 Mbit/s (2.5 MB/s); 10 ms one way everywhere.
const char* kTriangle = R"(
name: triangle
regions: [a, b, c]
defaults: {delay_ms: 10}
links:
  - {between: [a, b], bandwidth_mbps: 80}
  - {between: [b, c], bandwidth_mbps: 80}
  - {between: [a, c], bandwidth_mbps: 20}
)";
}  // namespace

TEST_CASE("a synchronous round's modelled exchange: each server's slowest push in, then back") {
  const auto p = netsim::parse_profile(kTriangle, "triangle.yaml");
  const std::vector<std::string> regions{"a", "b", "c"};
  // 3 MB a leader, 1 MB per server: a's and c's servers wait 0.4 s + 10 ms for the push over
  // the slow link, and as long again to send it back.
  CHECK(launcher::exchange_seconds(p, regions, {1, 1, 1}, 3e6) == doctest::Approx(0.82));
  // {1, 4, 1}: a's and c's servers hold 0.5 MB (0.2 s on the slow link), b's 2 MB (0.2 s on
  // the fast ones): 2 x 0.21 s.
  CHECK(launcher::exchange_seconds(p, regions, {1, 4, 1}, 3e6) == doctest::Approx(0.42));
  const auto best = launcher::best_placement(p, regions, 6, 3e6);
  CHECK(best.shards == std::vector<uint32_t>{1, 4, 1});
  CHECK(best.round_s == doctest::Approx(0.42));
  // Even links: even shards, and the most even of the ties.
  const auto lan = netsim::parse_profile(
      "name: even\nregions: [a, b, c]\nlinks: [{between: any, delay_ms: 5, bandwidth_mbps: 80}]\n",
      "even.yaml");
  CHECK(launcher::best_placement(lan, regions, 6, 3e6).shards == std::vector<uint32_t>{2, 2, 2});
  CHECK_THROWS_WITH_AS(launcher::best_placement(p, regions, 2, 3e6),
                       doctest::Contains("2 shards for 3 regions"), InputError);
  CHECK_THROWS_WITH_AS(launcher::exchange_seconds(p, {"a", "z"}, {1, 1}, 3e6),
                       doctest::Contains("has no link z->a"), std::exception);
}

TEST_CASE("geotrain place prints the best shards_per_region beside the even one") {
  const auto r = geotrain::test::run_binary("place --wan gaia --mb 0.94 --shards 6");
  INFO(r.text);
  CHECK(r.code == 0);
  CHECK(r.text.find("best  {us-east: 1, eu-west: 4, sa-east: 1}") != std::string::npos);
  CHECK(r.text.find("shards_per_region: {us-east: 1, eu-west: 4, sa-east: 1}") !=
        std::string::npos);
  const auto bad = geotrain::test::run_binary("place --wan gaia");
  CHECK(bad.code != 0);
  CHECK(bad.text.find("--mb, or --config") != std::string::npos);
}
