// Command-line overrides (`--set section.key=value`, `--wan PROFILE`): parsing, applying them to
// a config's YAML before any parser reads it, finding WAN profiles by name, the LAN control of a
// three-region config, and `geotrain run` / `geotrain sweep` with them (the run folder's
// config.yaml records them).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>

#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "core/wan_profile.hpp"
#include "launcher/run/deployment.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/port_allocator.hpp"
#include "launcher/run/run_settings.hpp"
#include "netsim/config.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::launcher;
namespace fs = std::filesystem;

namespace {
const fs::path kConfigs = fs::path(GEOTRAIN_SOURCE_DIR) / "configs";

const char* kThreeRegions = R"(
regions: [us-east, eu-west, ap-southeast]
model: {arch: "784-32-10", critical: ["fc2.*"]}
worker: {workers_per_region: 1, rounds: 3, optimizer: {kind: sgd, momentum: 0.9}}
run: {name: t, wan_profile: wan/global-3.yaml, target_accuracy: 0.8}
)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// --wan as the CLI passes it: the profile file, quoted, as run.wan_profile.
ConfigOverride wan_override(const std::string& name) {
  const auto file = find_wan_profile(name, wan_profile_search(kConfigs, kConfigs), "--wan");
  return {"run.wan_profile", fmt::format("\"{}\"", file.string()), fmt::format("--wan {}", name)};
}
}  // namespace

TEST_CASE("--set arguments split at the first '=' into a dotted key and a YAML value") {
  const auto o = parse_override("worker.critical_codec=topk:ratio=0.02");
  CHECK(o.key == "worker.critical_codec");
  CHECK(o.value == "topk:ratio=0.02");
  CHECK(o.origin == "--set worker.critical_codec=topk:ratio=0.02");
  CHECK(parse_override("regions=[a, b]").value == "[a, b]");
  CHECK(error_of([] { parse_override("worker.lr"); }).find("expected section.key=value") !=
        std::string::npos);
  CHECK(error_of([] { parse_override("=3"); }).find("key before '=' is empty") !=
        std::string::npos);
  CHECK(error_of([] { parse_override("worker..lr=3"); }).find("not a dotted config key") !=
        std::string::npos);
  CHECK(error_of([] { parse_override("worker.lr="); }).find("value after '=' is empty") !=
        std::string::npos);
}

TEST_CASE("overrides set nested keys, lists and mappings, creating sections on the way") {
  const auto text = apply_overrides(
      kThreeRegions,
      parse_overrides({"worker.optimizer.momentum=0.01", "regions=[a,b]",
                       "server.optimizer={lr: 0.7}", "worker.lr=0.2", "worker.lr=0.3"}),
      "t.yaml");
  const auto c = YAML::Load(text);
  CHECK(c["worker"]["optimizer"]["momentum"].as<double>() == doctest::Approx(0.01));
  CHECK(c["worker"]["optimizer"]["kind"].as<std::string>() == "sgd");  // siblings are kept
  REQUIRE(c["regions"].IsSequence());
  CHECK(c["regions"].size() == 2);
  CHECK(c["regions"][1].as<std::string>() == "b");
  CHECK(c["server"]["optimizer"]["lr"].as<double>() == doctest::Approx(0.7));
  CHECK(c["worker"]["lr"].as<double>() == doctest::Approx(0.3));  // the last one wins
  CHECK(c["model"]["arch"].as<std::string>() == "784-32-10");
  CHECK(apply_overrides(kThreeRegions, {}, "t.yaml") == kThreeRegions);  // untouched

  // Through a value, not a section: refused, naming the key.
  const auto e = error_of(
      [] { apply_overrides(kThreeRegions, parse_overrides({"worker.rounds.x=1"}), "t.yaml"); });
  CHECK(e.find("cannot set 'worker.rounds.x'") != std::string::npos);
  CHECK(e.find("'worker.rounds' is a value") != std::string::npos);
  CHECK(error_of([] {
          apply_overrides(kThreeRegions, parse_overrides({"worker.lr=[1,"}), "t.yaml");
        }).find("not valid YAML") != std::string::npos);
}

TEST_CASE("an overridden key is checked like a file key, and the error names the --set") {
  const auto overrides = parse_overrides({"run.taget_accuracy=0.9"});
  const auto source = describe_source("t.yaml", overrides);
  CHECK(source == "t.yaml (with --set run.taget_accuracy=0.9)");
  auto e = error_of([&] {
    parse_run_settings(apply_overrides(kThreeRegions, overrides, source), source, kConfigs, "t");
  });
  CHECK(e.find("t.yaml (with --set run.taget_accuracy=0.9): unknown key 'run.taget_accuracy'") !=
        std::string::npos);
  e = error_of([&] {
    const auto bad = parse_overrides({"run.target_accuracy=2"});
    parse_run_settings(apply_overrides(kThreeRegions, bad, "t.yaml"), "t.yaml", kConfigs, "t");
  });
  CHECK(e.find("run.target_accuracy is 2") != std::string::npos);
  const auto s = parse_run_settings(
      apply_overrides(kThreeRegions,
                      parse_overrides({"run.name=other", "worker.workers_per_region=3"}), "t.yaml"),
      "t.yaml", kConfigs, "t");
  CHECK(s.name == "other");
  CHECK(s.workers.in("us-east") == 3);
  CHECK(s.workers.total() == 9);
}

TEST_CASE("a WAN profile is found by name, by file name, or by path; an unknown one lists them") {
  test::TempDir tmp("overrides-wan-names");
  const auto search = wan_profile_search(tmp.path(), kConfigs);  // a config in tmp
  CHECK(find_wan_profile("lan", search, "--wan") ==
        (kConfigs / "wan" / "lan.yaml").lexically_normal());
  CHECK(find_wan_profile("global-3.yaml", search, "--wan").filename() == "global-3.yaml");
  const auto path = (kConfigs / "wan" / "us-eu.yaml").string();
  CHECK(find_wan_profile(path, {}, "--wan") == fs::path(path).lexically_normal());
  // A path relative to the config's folder, else to the project's configs/ (demo.yaml's
  // `wan/global-3.yaml` in a copy of it made elsewhere).
  CHECK(find_wan_profile("wan/global-3.yaml", search, "--wan") ==
        (kConfigs / "wan" / "global-3.yaml").lexically_normal());
  fs::create_directories(tmp.path() / "wan");
  fs::copy_file(kConfigs / "wan" / "us-eu.yaml", tmp.path() / "wan" / "lan.yaml");
  CHECK(find_wan_profile("lan", search, "--wan") == tmp.path() / "wan" / "lan.yaml");
  CHECK(find_wan_profile("wan/lan.yaml", search, "--wan") == tmp.path() / "wan" / "lan.yaml");

  const auto e = error_of([&] { find_wan_profile("lna", search, "my.yaml: run.wan_profile"); });
  CHECK(e.find("my.yaml: run.wan_profile is 'lna': no such WAN profile (did you mean 'lan'?); "
               "tried " +
               (tmp.path() / "lna").string() + ", " + (kConfigs / "lna").string() + ", " +
               (tmp.path() / "wan" / "lna.yaml").string() + ", " +
               (kConfigs / "wan" / "lna.yaml").string() + "; allowed: ") != std::string::npos);
  CHECK(e.find("allowed: the name of a profile (gaia, global-3, global-3-100m, lan, scarce, "
               "us-eu) or a profile file (relative to " +
               tmp.path().string() + ")") != std::string::npos);
  CHECK(e.find("`geotrain run --wan NAME` picks one") != std::string::npos);
  CHECK(e.find("example-netsim") == std::string::npos);  // not a profile
  // A path is not looked up as a name; --wan does not point at itself.
  const auto p = error_of([&] { find_wan_profile("profiles/x.yaml", search, "--wan"); });
  CHECK(p.find("--wan is 'profiles/x.yaml': no such WAN profile; tried " +
               (tmp.path() / "profiles/x.yaml").string() + ", " +
               (kConfigs / "profiles/x.yaml").string() + "; allowed: ") != std::string::npos);
  CHECK(p.find("geotrain run --wan") == std::string::npos);
  // A name the file system refuses (longer than NAME_MAX) is no file either.
  CHECK(error_of([&] {
          find_wan_profile(std::string(300, 'x'), search, "--wan");
        }).find("no such WAN profile") != std::string::npos);
  CHECK(error_of([&] { find_wan_profile("", search, "--wan"); }).find("--wan is empty") !=
        std::string::npos);
  // A folder where a profile file is wanted is named as a folder, not as missing.
  const auto wan_dir = (kConfigs / "wan").string();
  CHECK(error_of([&] {
          find_wan_profile(wan_dir, search, "--wan");
        }).find("--wan is '" + wan_dir + "': " + wan_dir + " is a folder, not a WAN profile") !=
        std::string::npos);
}

TEST_CASE("a copy of configs/demo.yaml made elsewhere finds its WAN profile, also by name") {
  test::TempDir tmp("overrides-demo-copy");
  const auto demo = read_text_file(kConfigs / "demo.yaml");
  const auto my = (tmp.path() / "my.yaml").string();
  // As `geotrain run my.yaml` reads it: the config's folder, then the project's configs/.
  auto s = parse_run_settings(demo, my, tmp.path(), "my", kConfigs);
  REQUIRE(s.wan_profile);
  CHECK(*s.wan_profile == (kConfigs / "wan" / "global-3.yaml").lexically_normal());
  // `--set run.wan_profile=global-3` takes a name, as --wan does.
  const auto overrides = parse_overrides({"run.wan_profile=global-3"});
  const auto source = describe_source(my, overrides);
  s = parse_run_settings(apply_overrides(demo, overrides, source), source, tmp.path(), "my",
                         kConfigs);
  REQUIRE(s.wan_profile);
  CHECK(*s.wan_profile == (kConfigs / "wan" / "global-3.yaml").lexically_normal());
  // Without the project's folder nothing is found, and the error says what was tried and what
  // to give instead.
  const auto e = error_of([&] { parse_run_settings(demo, my, tmp.path(), "my"); });
  CHECK(e.find(my + ": run.wan_profile is 'wan/global-3.yaml': no such WAN profile; tried " +
               (tmp.path() / "wan" / "global-3.yaml").string() + "; allowed: ") !=
        std::string::npos);
  CHECK(e.find("`geotrain run --wan NAME`") != std::string::npos);
}

TEST_CASE("switched to lan, a three-region config gets a zero-delay netsim link for every pair") {
  test::TempDir tmp("overrides-lan");
  const std::vector<ConfigOverride> overrides{wan_override("lan")};
  const auto source = describe_source("t.yaml", overrides);
  const auto text = apply_overrides(kThreeRegions, overrides, source);
  const auto s = parse_run_settings(text, source, kConfigs, "t");
  REQUIRE(s.wan_profile);
  CHECK(s.wan_profile->filename() == "lan.yaml");
  PortAllocator ports;
  const auto d = plan_deployment(text, source, s, tmp.path(), ports);
  REQUIRE(d.netsim_yaml);
  const auto n = netsim::parse_netsim_config(*d.netsim_yaml, "netsim.yaml", tmp.path());
  CHECK(n.profile.name == "lan");
  REQUIRE(n.links.size() == 6);
  for (const auto& l : n.links) {
    CHECK(l.properties.delay_ms == 0);
    CHECK(l.properties.bandwidth_mbps == 0);
  }
  // The resolved config records the profile it ran on, and where the override came from.
  CHECK(YAML::Load(d.config_yaml)["run"]["wan_profile"].as<std::string>() ==
        s.wan_profile->string());
  CHECK(d.config_yaml.find("--wan lan") != std::string::npos);
}

TEST_CASE("a profile without one of the pairs still fails the plan, naming the pair") {
  test::TempDir tmp("overrides-us-eu");
  const std::vector<ConfigOverride> overrides{wan_override("us-eu")};
  const auto text = apply_overrides(kThreeRegions, overrides, "t.yaml");
  const auto s = parse_run_settings(text, "t.yaml", kConfigs, "t");
  PortAllocator ports;
  const auto e = error_of([&] { plan_deployment(text, "t.yaml", s, tmp.path(), ports); });
  CHECK(e.find("the WAN profile does not fit this config") != std::string::npos);
  CHECK(e.find("WAN profile 'us-eu' has no link") != std::string::npos);
  CHECK(e.find("ap-southeast") != std::string::npos);
}

TEST_CASE("a run with --wan lan and --set overrides records them in the run folder's config") {
  test::TempDir tmp("overrides-run");
  // Servers and netsim are real; workers report one evaluation and finish.
  std::ofstream(tmp.path() / "fake-geotrain")
      << "#!/bin/sh\n"
         "if [ \"$1\" != worker ]; then exec " GEOTRAIN_BINARY
         " \"$@\"; fi\n"
         "region=$5; rank=$7; out=\"$(dirname \"$3\")/worker-$region-$rank.metrics.jsonl\"\n"
         "echo \"{\\\"event\\\":\\\"done\\\",\\\"region\\\":\\\"$region\\\",\\\"rank\\\":$rank,"
         "\\\"time\\\":0.2,\\\"rounds\\\":1,\\\"steps\\\":1,\\\"wall_s\\\":0.2,"
         "\\\"final_test_accuracy\\\":0.5}\" >> \"$out\"\n";
  fs::permissions(tmp.path() / "fake-geotrain", fs::perms::owner_all);
  std::ofstream(tmp.path() / "three.yaml")
      << "regions: [us-east, eu-west, ap-southeast]\n"
         "model: {tensors: [{name: w, size: 4096}, {name: head.b, size: 10}], critical: "
         "[\"head.*\"]}\n"
         "server: {heartbeat_ms: 200}\n"
         "worker: {workers_per_region: 1}\n"
         "run: {name: three, wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/global-3.yaml, plots: false, netsim_stats_interval_s: 0.1}\n";
  LaunchOptions o;
  o.config = tmp.path() / "three.yaml";
  o.out_dir = tmp.path() / "runs";
  o.binary = (tmp.path() / "fake-geotrain").string();
  o.redraw = false;
  o.grace_s = 5;
  o.overrides = parse_overrides({"worker.optimizer.momentum=0.05", "run.name=three-lan"});
  o.overrides.push_back(wan_override("lan"));
  std::string validated_source;
  o.validate = [&](const std::string&, const std::string& source) {
    if (validated_source.empty()) validated_source = source;
  };
  std::stop_source stop;
  const auto r = run_deployment(o, stop.get_token());
  CHECK(r.exit_code == 0);
  CHECK(validated_source.find("--set worker.optimizer.momentum=0.05") != std::string::npos);
  CHECK(r.run_dir.filename().string().ends_with("-three-lan"));
  const auto config = YAML::LoadFile((r.run_dir / "config.yaml").string());
  CHECK(config["worker"]["optimizer"]["momentum"].as<double>() == doctest::Approx(0.05));
  CHECK(fs::path(config["run"]["wan_profile"].as<std::string>()).filename() == "lan.yaml");
  const auto netsim = YAML::LoadFile((r.run_dir / "netsim.yaml").string());
  CHECK(fs::path(netsim["profile"].as<std::string>()).filename() == "lan.yaml");
  CHECK(netsim["links"].size() == 6);
}

TEST_CASE("geotrain run and sweep refuse a bad --set or --wan, naming it, before anything starts") {
  test::TempDir tmp("overrides-cli");
  const auto config = tmp.path() / "c.yaml";
  std::ofstream(config) << "regions: [a, b]\nmodel: {arch: 784-10}\n"
                           "run: {wan_profile: " GEOTRAIN_SOURCE_DIR "/configs/wan/us-eu.yaml}\n";
  const auto out = " --out " + (tmp.path() / "runs").string();
  auto r = test::run_binary("run " + config.string() + out + " --set worker.bacth_size=3");
  CHECK(r.code == 2);
  CHECK(r.text.find("(with --set worker.bacth_size=3): unknown key 'worker.bacth_size'") !=
        std::string::npos);
  r = test::run_binary("run " + config.string() + out + " --set server.staleness_bound=-1");
  CHECK(r.code == 2);
  CHECK(r.text.find("server.staleness_bound") != std::string::npos);
  r = test::run_binary("run " + config.string() + out + " --set worker.lr");
  CHECK(r.code == 2);
  CHECK(r.text.find("expected section.key=value") != std::string::npos);
  r = test::run_binary("run " + config.string() + out + " --wan nowhere");
  CHECK(r.code == 2);
  CHECK(r.text.find("--wan is 'nowhere': no such WAN profile; tried ") != std::string::npos);
  CHECK(r.text.find("global-3, global-3-100m, lan") != std::string::npos);
  r = test::run_binary("run " + config.string() + out + " --set run.wan_profile=glboal-3");
  CHECK(r.code == 2);
  CHECK(r.text.find("run.wan_profile is 'glboal-3': no such WAN profile (did you mean "
                    "'global-3'?); tried ") != std::string::npos);
  CHECK(r.text.find("`geotrain run --wan NAME`") != std::string::npos);
  r = test::run_binary("run " + config.string() + out + " --wan lan --set run.wan_profile=x.yaml");
  CHECK(r.code == 2);
  CHECK(r.text.find("give one of them") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "runs"));
  // Regions the config's profile (us-eu) does not name: refused when the plan is made.
  r = test::run_binary("run " + config.string() + out + " --set regions=[x,y]");
  CHECK(r.code == 2);
  CHECK(r.text.find("has no link x->y") != std::string::npos);

  std::ofstream(tmp.path() / "s.yaml") << "base: c.yaml\ngrid: {worker.lr: [0.1, 0.2]}\n";
  r = test::run_binary("sweep " + (tmp.path() / "s.yaml").string() + out + " --set worker.lr=0.3");
  CHECK(r.code == 2);
  CHECK(r.text.find("the sweep sets 'worker.lr' itself") != std::string::npos);
}

TEST_CASE("geotrain run takes a copy of demo.yaml made elsewhere, and says a folder is a folder") {
  test::TempDir tmp("overrides-cli-copy");
  fs::copy_file(kConfigs / "demo.yaml", tmp.path() / "my.yaml");
  const auto out = " --out " + (tmp.path() / "runs").string();
  // Its `wan/global-3.yaml` is found in the project's configs/: the run gets as far as the
  // workers' keys, where a typo (with its correction) stops it before anything starts.
  auto r = test::run_binary("run " + (tmp.path() / "my.yaml").string() + out +
                            " --set worker.bacth_size=3");
  CHECK(r.code == 2);
  CHECK(r.text.find("unknown key 'worker.bacth_size'; did you mean 'worker.batch_size'?") !=
        std::string::npos);
  CHECK(r.text.find("wan_profile") == std::string::npos);
  r = test::run_binary("run " + tmp.path().string() + out);
  CHECK(r.code == 2);
  CHECK(r.text.find("config file '" + tmp.path().string() +
                    "' is a directory, not a YAML file (it holds my.yaml)") != std::string::npos);
  r = test::run_binary("run " + (tmp.path() / "nothere.yaml").string() + out);
  CHECK(r.code == 2);
  CHECK(r.text.find("config file '" + (tmp.path() / "nothere.yaml").string() +
                    "' does not exist") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "runs"));

  // A name works in --set as it does in --wan: us-eu is found, and refused when the plan is
  // made because it has no link to the demo's third region.
  r = test::run_binary("run " + (tmp.path() / "my.yaml").string() + out +
                       " --set run.wan_profile=us-eu");
  CHECK(r.code == 2);
  CHECK(r.text.find("has no link") != std::string::npos);
  CHECK(r.text.find("no such WAN profile") == std::string::npos);
}
