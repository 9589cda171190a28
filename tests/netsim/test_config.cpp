// WAN profiles and netsim configs: the shipped files parse to their documented numbers, and
// bad input is refused with a message naming the key, the value and what is allowed.
#include <doctest/doctest.h>

#include <string>

#include "netsim/config.hpp"
#include "netsim/proxy.hpp"
#include "netsim/token_bucket.hpp"

namespace geotrain::netsim {

namespace {
const std::filesystem::path kWan = std::filesystem::path(GEOTRAIN_SOURCE_DIR) / "configs/wan";

std::string error_of(const std::string& yaml) {
  try {
    parse_netsim_config(yaml, "t.yaml", kWan);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kProfile =
    "profile: {name: p, regions: [a, b], links: [{between: [a, b], delay_ms: 5}]}\n";
}  // namespace

TEST_CASE("the standard profiles parse to their documented link properties") {
  const auto g3 = load_profile(kWan / "global-3.yaml");
  CHECK(g3.regions.size() == 3);
  CHECK(g3.links.size() == 6);
  CHECK(2 * g3.link("us-east", "eu-west").delay_ms == 80);
  CHECK(2 * g3.link("ap-southeast", "us-east").delay_ms == 217);
  CHECK(2 * g3.link("eu-west", "ap-southeast").delay_ms == 239);
  CHECK(g3.link("us-east", "eu-west").bandwidth_mbps == 1000);
  CHECK(load_profile(kWan / "global-3-100m.yaml").link("us-east", "eu-west").bandwidth_mbps == 100);
  CHECK(load_profile(kWan / "scarce.yaml").link("region-a", "region-b").bandwidth_mbps == 100);
  const auto gaia = load_profile(kWan / "gaia.yaml");
  CHECK(gaia.link("us-east", "sa-east").bandwidth_mbps ==
        doctest::Approx(1000.0 / 60).epsilon(0.01));
  CHECK(gaia.link("us-east", "eu-west").bandwidth_mbps ==
        doctest::Approx(1000.0 / 15).epsilon(0.01));
  CHECK(load_profile(kWan / "lan.yaml").link("region-b", "region-a").delay_ms == 0);
  CHECK(2 * load_profile(kWan / "us-eu.yaml").link("eu-west", "us-east").delay_ms == 80);
}

TEST_CASE("the example netsim config resolves its profile and per-link overrides") {
  const auto cfg = load_netsim_config(kWan / "example-netsim.yaml");
  REQUIRE(cfg.links.size() == 2);
  CHECK(cfg.links[0].name() == "us-east->eu-west");
  CHECK(cfg.links[0].listen.port == 17001);
  CHECK(cfg.links[0].target.port == 18001);
  CHECK(cfg.links[0].properties.delay_ms == 40);
  REQUIRE(cfg.links[0].faults.size() == 1);
  CHECK(cfg.links[0].faults[0].kind == FaultKind::partition);
  CHECK(*cfg.links[0].faults[0].until_s == 70);
  CHECK(cfg.links[1].properties.bandwidth_mbps == 500);
  CHECK(cfg.options.stats_interval_s == 5);
}

TEST_CASE("config errors name the key, the value and what is allowed") {
  const std::string link = "links: [{from: a, to: b, listen: '127.0.0.1:0', target: '127.0.0.1:9'";
  CHECK(error_of(kProfile + link + "}]").empty());
  auto e = error_of(kProfile + link + ", delay_ms: -3}]");
  CHECK(e.find("links[0].delay_ms") != std::string::npos);
  CHECK(e.find("-3") != std::string::npos);
  CHECK(e.find("allowed: [0, 60000]") != std::string::npos);
  e = error_of(kProfile + link + ", dealy_ms: 3}]");
  CHECK(e.find("unknown key 'links[0].dealy_ms'") != std::string::npos);
  CHECK(e.find("delay_ms") != std::string::npos);  // the allowed keys are listed
  e = error_of(kProfile +
               "links: [{from: a, to: c, listen: '127.0.0.1:0', target: '127.0.0.1:9'}]");
  CHECK(e.find("links[0].to") != std::string::npos);
  e = error_of(kProfile +
               "links: [{from: a, to: b, listen: 'localhost:80', target: '127.0.0.1:9'}]");
  CHECK(e.find("links[0].listen") != std::string::npos);
  CHECK(e.find("numeric IPv4") != std::string::npos);
  e = error_of(kProfile + link + ", faults: [{kind: partition, at_s: 3}]}]");
  CHECK(e.find("until_s") != std::string::npos);
  e = error_of(kProfile + link + ", faults: [{kind: crash, at_s: 3}]}]");
  CHECK(e.find("must be partition, reset, set or blackhole") != std::string::npos);
  e = error_of(kProfile + "bogus: 1\n" + link + "}]");
  CHECK(e.find("unknown key 'bogus'") != std::string::npos);
  CHECK(error_of("profile: nowhere.yaml\n" + link + "}]").find("no such file") !=
        std::string::npos);
  // Found by fuzz_netsim_config: a file name longer than NAME_MAX made the lookup throw a
  // std::filesystem_error instead of naming the key.
  e = error_of("profile: " + std::string(300, 'x') + ".yaml\n" + link + "}]");
  CHECK(e.find("profile") != std::string::npos);
  CHECK(e.find("cannot be looked up") != std::string::npos);
  // Without a profile: named as missing (it was yaml-cpp's "invalid node" before).
  e = error_of(link + "}]");
  CHECK(e.find("profile is missing: a WAN profile file path or an inline profile mapping") !=
        std::string::npos);
}

TEST_CASE("a netsim config refuses a key written twice and yes for true, and suggests a near key") {
  const std::string link = "links: [{from: a, to: b, listen: '127.0.0.1:0', target: '127.0.0.1:9'";
  auto e = error_of(kProfile + link + ", delay_ms: 3, delay_ms: 50}]");
  CHECK(e.find("t.yaml: key 'links[].delay_ms' is written twice (both on line 2)") !=
        std::string::npos);
  e = error_of(kProfile + link + "}]\nstats: {log: yes}\n");
  // The same words as every config reader's (core/yaml_reader.hpp).
  CHECK(e.find("t.yaml: stats.log is 'yes', allowed: true or false") != std::string::npos);
  CHECK(error_of(kProfile + link + "}]\nstats: {log: false}\n").empty());
  e = error_of(kProfile + link + ", dealy_ms: 3}]");
  CHECK(e.find("unknown key 'links[0].dealy_ms'; did you mean 'links[0].delay_ms'? (allowed: ") !=
        std::string::npos);
  CHECK_THROWS_WITH_AS(parse_profile("name: p\nregions: [a, b]\nname: q\n", "p.yaml"),
                       doctest::Contains("p.yaml: key 'name' is written twice (lines 1 and 3)"),
                       InputError);
}

TEST_CASE("the lan profile's between-any link covers every pair, whatever the regions are called") {
  const auto lan = load_profile(kWan / "lan.yaml");
  CHECK(lan.regions.empty());  // it names none: it fits any deployment
  REQUIRE(lan.any_pair);
  for (const char* from : {"us-east", "eu-west", "ap-southeast"})
    for (const char* to : {"us-east", "eu-west", "ap-southeast"}) {
      if (std::string(from) == to) continue;
      const auto& p = lan.link(from, to);
      CHECK(p.delay_ms == 0);
      CHECK(p.bandwidth_mbps == 0);
      CHECK(p.window_kib == 0);
    }
  // A netsim config for three regions resolves every one of its links against lan.
  std::string yaml = "profile: lan.yaml\nlinks:\n";
  int port = 9001;
  for (const char* from : {"us-east", "eu-west", "ap-southeast"})
    for (const char* to : {"us-east", "eu-west", "ap-southeast"})
      if (std::string(from) != to)
        yaml +=
            fmt::format("  - {{from: {}, to: {}, listen: '127.0.0.1:0', target: '127.0.0.1:{}'}}\n",
                        from, to, port++);
  const auto cfg = parse_netsim_config(yaml, "t.yaml", kWan);
  CHECK(cfg.links.size() == 6);
  for (const auto& l : cfg.links) CHECK(l.properties.delay_ms == 0);
}

TEST_CASE("listed links win over between-any, which takes the profile's defaults") {
  const auto p = parse_profile(
      "name: p\nregions: [a, b]\ndefaults: {bandwidth_mbps: 100}\n"
      "links: [{between: [a, b], delay_ms: 5}, {between: any, delay_ms: 50}]\n",
      "p.yaml");
  CHECK(p.link("a", "b").delay_ms == 5);
  CHECK(p.link("b", "a").delay_ms == 5);
  CHECK(p.link("a", "c").delay_ms == 50);  // a region the profile does not name
  CHECK(p.link("c", "a").bandwidth_mbps == 100);
  CHECK(p.links.size() == 2);  // between: any is not a listed link
}

TEST_CASE("a pair a profile neither lists nor covers is an error naming the profile and the pair") {
  const auto g3 = load_profile(kWan / "global-3.yaml");
  CHECK_FALSE(g3.any_pair);
  CHECK_THROWS_WITH_AS(g3.link("us-east", "sa-east"),
                       doctest::Contains("WAN profile 'global-3' has no link us-east->sa-east"),
                       InputError);
  CHECK_THROWS_WITH_AS(g3.link("us-east", "sa-east"), doctest::Contains("between: any"),
                       InputError);
  auto e = error_of(kProfile +
                    "links: [{from: a, to: c, listen: '127.0.0.1:0', target: '127.0.0.1:9'}]");
  CHECK(e.find("links[0].to") != std::string::npos);
  CHECK(e.find("has no link a->c") != std::string::npos);
  CHECK(e.find("it lists a->b, b->a") != std::string::npos);
}

TEST_CASE("between-any errors: a bad value, twice, and no regions without it") {
  auto profile_error = [](const std::string& yaml) {
    try {
      parse_profile(yaml, "p.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(profile_error("name: p\nregions: [a]\nlinks: [{between: all}]\n").find("or 'any'") !=
        std::string::npos);
  CHECK(profile_error("links: [{between: any}]\n").find("name is missing") != std::string::npos);
  CHECK(profile_error("name: p\nlinks: [{between: any}, {between: any, delay_ms: 1}]\n")
            .find("given twice") != std::string::npos);
  CHECK(profile_error("name: p\nlinks: [{between: [a, b]}]\n").find("regions is missing") !=
        std::string::npos);
  CHECK(profile_error("name: p\nregions: [a]\nlinks: [{between: [a, z]}, {between: any}]\n")
            .find("not one of the profile's regions") != std::string::npos);
  CHECK(profile_error("name: p\nlinks: [{between: [a, b]}, {between: any}]\n").empty());
}

TEST_CASE("a proxy refuses link properties that config files could not express") {
  LinkConfig l;
  l.from = std::string("a");
  l.to = std::string("b");
  l.properties.delay_ms = -1;
  CHECK_THROWS_WITH_AS(WanProxy({l}, ProxyOptions{}), doctest::Contains("delay_ms is -1"),
                       InputError);
  l.properties.delay_ms = 1;
  Fault backwards;
  backwards.kind = FaultKind::partition;
  backwards.at_s = 2;
  backwards.until_s = 1;
  l.faults.push_back(backwards);
  CHECK_THROWS_WITH_AS(WanProxy({l}, ProxyOptions{}), doctest::Contains("until_s"), InputError);
}

TEST_CASE("a token bucket releases a burst at once, then paces at its rate") {
  using namespace std::chrono;
  const auto t0 = TokenBucket::Clock::time_point{} + seconds(100);
  TokenBucket b(1e6, 10'000, t0);  // 1 MB/s, 10 kB burst
  CHECK(b.reserve(10'000, t0) == t0);
  const auto t1 = b.reserve(1'000, t0);  // 1 kB more needs 1 ms of refill
  CHECK(duration<double>(t1 - t0).count() == doctest::Approx(1e-3));
  const auto t2 = b.reserve(500'000, t0);  // bigger than the burst: waits for a full bucket
  CHECK(duration<double>(t2 - t1).count() == doctest::Approx(0.01));
  const auto t3 = b.reserve(1, t0);  // the debt of the big chunk is paid before the next byte
  CHECK(duration<double>(t3 - t0).count() == doctest::Approx(0.501).epsilon(0.001));
}

// Regressions (fuzz/corpus/netsim_config/crash-*): a profile without `name` escaped as
// YAML::InvalidNode, a complex key as YAML::TypedBadConversion.
TEST_CASE("a profile without a name, or with a key that is not a name, gets an InputError") {
  CHECK_THROWS_WITH_AS(
      parse_profile("regions: [a, b]\nlinks:\n  - {between: [a, b], delay_ms: 1}\n", "p.yaml"),
      doctest::Contains("name is missing"), InputError);
  CHECK_THROWS_WITH_AS(parse_profile("name: x\n? [a]\n: 1\n", "p.yaml"),
                       doctest::Contains("not a plain name"), InputError);
}

}  // namespace geotrain::netsim
