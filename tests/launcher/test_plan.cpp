// The launcher's pure parts: run settings and their errors, the run folder, port allocation,
// and the deployment plan (resolved config, netsim links, worker routes, process list).
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <csignal>
#include <optional>
#include <set>
#include <string>

#include "core/error.hpp"
#include "launcher/run/deployment.hpp"
#include "launcher/run/port_allocator.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/run_settings.hpp"
#include "netsim/config.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::launcher;
namespace fs = std::filesystem;

namespace {
const fs::path kWanDir = fs::path(GEOTRAIN_SOURCE_DIR) / "configs";

const char* kThreeRegions = R"(
regions: [us-east, eu-west, ap-southeast]
model: {arch: "784-32-10", critical: ["fc2.*"]}
server: {staleness_bound: 2}
worker: {workers_per_region: 2, rounds: 3}
run: {name: t, wan_profile: wan/global-3.yaml, target_accuracy: 0.8}
)";

std::string error_of(const std::string& yaml) {
  try {
    parse_run_settings(yaml, "t.yaml", kWanDir, "t");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A TCP socket bound to 127.0.0.1:port, not listening yet.
int bound_socket(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  return fd;
}
}  // namespace

TEST_CASE("run settings are read from the run section, with the config's regions and workers") {
  const auto s = parse_run_settings(kThreeRegions, "t.yaml", kWanDir, "default-name");
  CHECK(s.name == "t");
  CHECK(s.regions.size() == 3);
  CHECK(s.workers.in("eu-west") == 2);
  CHECK_FALSE(s.workers.uneven());
  REQUIRE(s.wan_profile);
  CHECK(s.wan_profile->filename() == "global-3.yaml");
  CHECK(s.target_accuracy == doctest::Approx(0.8));
  CHECK(s.out_dir == "runs");
  CHECK(s.base_port == 0);
}

TEST_CASE("an unknown run key is an error naming the key and the allowed keys") {
  const auto e = error_of("regions: [a]\nrun: {nmae: x}\n");
  CHECK(e.find("run.nmae") != std::string::npos);
  CHECK(e.find("allowed: ") != std::string::npos);
  CHECK(e.find("wan_profile") != std::string::npos);
}

TEST_CASE("run values out of range are errors naming the key, the value and the range") {
  const auto e = error_of("regions: [a]\nrun: {target_accuracy: 1.5}\n");
  CHECK(e.find("run.target_accuracy is 1.5") != std::string::npos);
  CHECK(e.find("[0, 1]") != std::string::npos);
  CHECK(error_of("regions: [a]\nrun: {base_port: -4}\n").find("run.base_port") !=
        std::string::npos);
  CHECK(error_of("regions: [a]\nrun: {plots: maybe}\n").find("true or false") != std::string::npos);
  CHECK(error_of("regions: [a]\nrun: {name: a/b}\n").find("run.name is 'a/b'") !=
        std::string::npos);
}

TEST_CASE("several regions need a WAN profile, and a missing profile file is named") {
  CHECK(error_of("regions: [a, b]\n").find("run.wan_profile is missing") != std::string::npos);
  CHECK(error_of("regions: [a, b]\nrun: {wan_profile: wan/nope.yaml}\n").find("wan/nope.yaml") !=
        std::string::npos);
  // A name the file system refuses (longer than NAME_MAX) is the same error, not a
  // std::filesystem_error (the class of bug fuzz_netsim_config found in netsim's loader).
  CHECK(error_of("regions: [a, b]\nrun: {wan_profile: " + std::string(300, 'x') + ".yaml}\n")
            .find("run.wan_profile is 'xxx") != std::string::npos);
  CHECK(error_of("regions: [a, a]\n").find("'a' twice") != std::string::npos);
  CHECK(error_of("regions: [a]\nbogus: 1\n").find("unknown key 'bogus'") != std::string::npos);
}

TEST_CASE("run folders are named by time and name, and never reused") {
  test::TempDir tmp("launcher-folder");
  const auto when = std::chrono::system_clock::now();
  const auto a = create_run_folder(tmp.path() / "runs", "demo", when);
  const auto b = create_run_folder(tmp.path() / "runs", "demo", when);
  CHECK(a != b);
  CHECK(fs::is_directory(a));
  CHECK(fs::is_directory(b));
  const auto name = a.filename().string();
  CHECK(name.size() == std::string("20260101-120000-demo").size());
  CHECK(name.ends_with("-demo"));
  CHECK(b.filename().string() == name + "-2");
}

TEST_CASE("allocated ports are distinct and bindable, from a base port or from the kernel") {
  for (uint16_t base : {uint16_t{0}, uint16_t{23100}}) {
    PortAllocator ports(base);
    std::set<uint16_t> seen;
    for (int i = 0; i < 8; ++i) seen.insert(ports.allocate());
    CHECK(seen.size() == 8);
    if (base != 0) CHECK(*seen.begin() >= base);
    ports.release();
    // Released ports accept nothing (nobody listens), and a fresh allocator may hand them out.
    CHECK_FALSE(port_accepts("127.0.0.1", *seen.begin(), 50));
    CHECK_FALSE(port_listening(*seen.begin(), ::getpid()));
  }
}

TEST_CASE("a listening port is seen without connecting to it") {
  PortAllocator ports(0);
  const uint16_t port = ports.allocate();
  ports.release();
  CHECK_FALSE(port_listening(port, ::getpid()));
  const int fd = bound_socket(port);
  CHECK_FALSE(port_listening(port, ::getpid()));  // bound is not listening
  REQUIRE(::listen(fd, 4) == 0);
  CHECK(port_listening(port, ::getpid()));
  // Nothing connected: a connection would be waiting to be accepted.
  pollfd p{fd, POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);
  ::close(fd);
  CHECK_FALSE(port_listening(port, ::getpid()));
}

TEST_CASE("two allocators of one process never hand out the same port while both live") {
  // `geotrain sweep --jobs`: deployments on threads of one process, each releasing its probes to
  // its children while the next one allocates.
  std::optional<PortAllocator> first(std::in_place, uint16_t{23300});
  const uint16_t port = first->allocate();
  first->release();  // free in the kernel now, still this deployment's
  {
    PortAllocator second(port);
    CHECK(second.allocate() != port);
  }
  std::set<uint16_t> a, b;
  PortAllocator kernel_a(0), kernel_b(0);
  for (int i = 0; i < 64; ++i) a.insert(kernel_a.allocate());
  kernel_a.release();
  for (int i = 0; i < 64; ++i) b.insert(kernel_b.allocate());
  for (uint16_t p : b) CHECK_MESSAGE(!a.contains(p), p);
  first.reset();  // the deployment ended: its port may be handed out again
  PortAllocator third(port);
  CHECK(third.allocate() == port);
}

TEST_CASE("a port is a process's only while a socket of that process listens on it") {
  // A child made before the socket, so that it does not inherit it.
  const pid_t other = ::fork();
  REQUIRE(other >= 0);
  if (other == 0) {
    ::pause();
    ::_exit(0);
  }
  PortAllocator ports(0);
  const uint16_t port = ports.allocate();
  ports.release();
  const int fd = bound_socket(port);
  CHECK_FALSE(port_listening(port, ::getpid()));  // bound is not listening
  REQUIRE(::listen(fd, 4) == 0);
  CHECK(port_listening(port, ::getpid()));
  CHECK(ports_listening({port}, ::getpid()));
  CHECK_FALSE(ports_listening({port, ports.allocate()}, ::getpid()));  // not on every port
  CHECK_FALSE(port_listening(port, other));  // listening, but not the other process's socket
  ::close(fd);
  CHECK_FALSE(port_listening(port, ::getpid()));
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
  CHECK_FALSE(port_listening(port, other));  // gone
}

TEST_CASE("the plan routes every inter-region connection through netsim and nothing else") {
  test::TempDir tmp("launcher-plan");
  const auto s = parse_run_settings(kThreeRegions, "t.yaml", kWanDir, "t");
  PortAllocator ports;
  const auto d = plan_deployment(kThreeRegions, "t.yaml", s, tmp.path(), ports);

  // 3 servers + 6 directed links, all distinct ports.
  std::set<uint16_t> used;
  for (const auto& [_, p] : d.server_ports) used.insert(p);
  for (const auto& r : d.routes) used.insert(r.listen_port);
  CHECK(d.routes.size() == 6);
  CHECK(used.size() == 9);

  const auto config = YAML::Load(d.config_yaml);
  CHECK(config["server"]["staleness_bound"].as<int>() == 2);  // the user's settings are kept
  CHECK(config["server"]["run_dir"].as<std::string>() == fs::absolute(tmp.path()).string());
  CHECK(config["worker"]["run_dir"].as<std::string>() == fs::absolute(tmp.path()).string());
  CHECK(config["worker"]["rounds"].as<int>() == 3);
  for (const auto& from : s.regions) {
    CHECK(config["server"]["endpoints"][from].as<std::string>() ==
          fmt::format("tcp://127.0.0.1:{}", d.server_ports.at(from)));
    CHECK_FALSE(
        config["worker"]["routes"][from][from]);  // a region reaches its own server directly
    for (const auto& to : s.regions) {
      if (from == to) continue;
      const auto endpoint = config["worker"]["routes"][from][to].as<std::string>();
      bool via_netsim = false;
      for (const auto& r : d.routes)
        if (r.from == from && r.to == to)
          via_netsim = endpoint == fmt::format("tcp://127.0.0.1:{}", r.listen_port);
      CHECK_MESSAGE(via_netsim, from << " -> " << to << " goes to " << endpoint);
    }
  }

  // The netsim config: one link per route, listening where the route points, forwarding to the
  // target region's server, with the profile's delay.
  REQUIRE(d.netsim_yaml);
  const auto n = netsim::parse_netsim_config(*d.netsim_yaml, "netsim.yaml", tmp.path());
  REQUIRE(n.links.size() == 6);
  int transatlantic = 0;
  for (const auto& l : n.links) {
    bool matched = false;
    for (const auto& r : d.routes)
      matched |= r.from == l.from && r.to == l.to && r.listen_port == l.listen.port &&
                 l.target.port == d.server_ports.at(l.to);
    CHECK_MESSAGE(matched, l.name());
    if (l.name() == "us-east->eu-west") {
      ++transatlantic;
      CHECK(l.properties.delay_ms == doctest::Approx(40));
    }
  }
  CHECK(transatlantic == 1);
  CHECK(n.options.stats_jsonl == tmp.path() / "netsim.jsonl");

  // Processes: servers, then netsim, then 2 workers per region, each with the resolved config.
  REQUIRE(d.processes.size() == 3 + 1 + 6);
  CHECK(d.processes[0].name == "server-us-east");
  CHECK(d.processes[0].health_ports == std::vector<uint16_t>{d.server_ports.at("us-east")});
  CHECK(d.processes[3].role == ProcessRole::netsim);
  CHECK(d.processes[3].health_ports.size() == 6);
  CHECK(d.processes[9].name == "worker-ap-southeast-1");
  const std::vector<std::string> args{
      "worker",   "--config",     (fs::absolute(tmp.path()) / "config.yaml").string(),
      "--region", "ap-southeast", "--rank",
      "1"};
  CHECK(d.processes[9].args == args);
}

TEST_CASE("netsim overrides in the config reach the generated links, and bad ones are named") {
  test::TempDir tmp("launcher-netsim");
  const std::string yaml =
      std::string(kThreeRegions) +
      "netsim:\n  seed: 7\n  links:\n    - {from: us-east, to: eu-west, delay_ms: 5,"
      " faults: [{kind: partition, at_s: 1, until_s: 2}]}\n";
  const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
  PortAllocator ports;
  const auto d = plan_deployment(yaml, "t.yaml", s, tmp.path(), ports);
  const auto n = netsim::parse_netsim_config(*d.netsim_yaml, "netsim.yaml", tmp.path());
  CHECK(n.options.seed == 7);
  REQUIRE(n.links.size() == 6);
  int overridden = 0;
  for (const auto& l : n.links) {
    if (l.name() == "us-east->eu-west") {
      ++overridden;
      CHECK(l.properties.delay_ms == doctest::Approx(5));
      CHECK(l.faults.size() == 1);
    } else {
      CHECK(l.faults.empty());
    }
  }
  CHECK(overridden == 1);
  CHECK_FALSE(YAML::Load(d.config_yaml)["netsim"]);

  const std::string bad =
      std::string(kThreeRegions) + "netsim:\n  links:\n    - {from: us-east, to: mars}\n";
  CHECK_THROWS_WITH_AS(plan_deployment(bad, "t.yaml", s, tmp.path(), ports),
                       doctest::Contains("region 'mars'"), InputError);
  const std::string bad_key = std::string(kThreeRegions) +
                              "netsim:\n  links:\n    - {from: us-east, to: eu-west, delay: 3}\n";
  CHECK_THROWS_WITH_AS(plan_deployment(bad_key, "t.yaml", s, tmp.path(), ports),
                       doctest::Contains("delay"), InputError);
}

TEST_CASE("a WAN profile without one of the config's regions is refused before anything starts") {
  test::TempDir tmp("launcher-profile");
  const char* yaml = "regions: [us-east, mars]\nrun: {wan_profile: wan/us-eu.yaml}\n";
  const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
  PortAllocator ports;
  CHECK_THROWS_WITH_AS(plan_deployment(yaml, "t.yaml", s, tmp.path(), ports),
                       doctest::Contains("WAN profile does not fit"), InputError);
}

TEST_CASE("an uneven fleet starts each region's own count of workers, numbered from 0 in each") {
  test::TempDir tmp("launcher-uneven");
  const char* yaml =
      "regions: [us-east, eu-west, ap-southeast]\n"
      "worker: {workers_per_region: {us-east: 3, eu-west: 1, ap-southeast: 2}}\n"
      "run: {wan_profile: global-3}\n";
  const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
  CHECK(s.workers.total() == 6);
  CHECK(s.workers.text() == "{us-east: 3, eu-west: 1, ap-southeast: 2}");
  PortAllocator ports;
  const auto d = plan_deployment(yaml, "t.yaml", s, tmp.path(), ports);
  std::vector<std::string> workers;
  for (const auto& p : d.processes)
    if (p.role == ProcessRole::worker) workers.push_back(p.name);
  CHECK(workers == std::vector<std::string>{"worker-us-east-0", "worker-us-east-1",
                                            "worker-us-east-2", "worker-eu-west-0",
                                            "worker-ap-southeast-0", "worker-ap-southeast-1"});
  // A region left out of the mapping, or one the config does not have, is named.
  CHECK_THROWS_WITH_AS(parse_run_settings("regions: [a, b]\nworker: {workers_per_region: {a: 2}}\n",
                                          "t.yaml", kWanDir, "t"),
                       doctest::Contains("worker.workers_per_region has no value for region 'b'"),
                       InputError);
  CHECK_THROWS_WITH_AS(
      parse_run_settings("regions: [a]\nworker: {workers_per_region: {a: 1, z: 2}}\n", "t.yaml",
                         kWanDir, "t"),
      doctest::Contains("worker.workers_per_region.z"), InputError);
}

TEST_CASE("one region needs no netsim and no routes") {
  test::TempDir tmp("launcher-one");
  const char* yaml = "regions: [solo]\nworker: {workers_per_region: 1}\n";
  const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
  PortAllocator ports;
  const auto d = plan_deployment(yaml, "t.yaml", s, tmp.path(), ports);
  CHECK_FALSE(d.netsim_yaml);
  CHECK(d.processes.size() == 2);
  CHECK_FALSE(YAML::Load(d.config_yaml)["worker"]["routes"]);
}

// Regression (fuzz/corpus/run_config/crash-complex-key*.yaml): a complex key escaped
// parse_run_settings as YAML::TypedBadConversion.
TEST_CASE("run settings with a key that is not a plain name get an InputError") {
  CHECK_THROWS_WITH_AS(
      parse_run_settings("? [a, b]\n: 1\nregions: [us-east]\n", "t.yaml", kWanDir, "t"),
      doctest::Contains("not a plain name"), InputError);
}

TEST_CASE("CURVE is on by default for WAN profiles, off for lan, and can be switched off") {
  test::TempDir dir("plan-curve");
  auto plan = [&](const std::string& extra, const std::string& profile = "wan/global-3.yaml") {
    std::string yaml = kThreeRegions;
    if (profile != "wan/global-3.yaml") {
      const auto at = yaml.find("wan/global-3.yaml");
      yaml.replace(at, std::string("wan/global-3.yaml").size(), profile);
    }
    yaml += extra;
    const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
    PortAllocator ports(0);
    return plan_deployment(yaml, "t.yaml", s, dir.path(), ports);
  };
  auto security_of = [](const Deployment& d) { return YAML::Load(d.config_yaml)["security"]; };
  {
    const auto d = plan("");  // global-3, nothing said: auto -> on, keys generated in the run
    CHECK(d.curve);
    REQUIRE(d.keys_to_generate);
    CHECK(*d.keys_to_generate == fs::absolute(dir.path()) / "keys");
    CHECK(security_of(d)["curve"].as<bool>());
    CHECK(security_of(d)["keys_dir"].as<std::string>() == d.keys_to_generate->string());
  }
  {
    const auto d = plan("", "wan/lan.yaml");
    CHECK_FALSE(d.curve);
    CHECK_FALSE(d.keys_to_generate);
    CHECK_FALSE(security_of(d)["curve"].as<bool>());
  }
  {
    const auto d = plan("security: {curve: false}\n");
    CHECK_FALSE(d.curve);
    CHECK_FALSE(security_of(d)["curve"].as<bool>());
  }
  {
    const auto d = plan("security: {curve: true, keys_dir: /etc/geo/keys}\n", "wan/lan.yaml");
    CHECK(d.curve);
    CHECK_FALSE(d.keys_to_generate);
    CHECK(security_of(d)["keys_dir"].as<std::string>() == "/etc/geo/keys");
  }
  CHECK_THROWS_WITH_AS(plan("security: {curve: on, key_dir: x}\n"),
                       doctest::Contains("security.key_dir"), InputError);
}

TEST_CASE("streams per server: auto on an emulated WAN takes the count its slowest link needs") {
  test::TempDir tmp("launcher-streams");
  auto streams_of = [&](const std::string& yaml) {
    const auto s = parse_run_settings(yaml, "t.yaml", kWanDir, "t");
    PortAllocator ports;
    const auto d = plan_deployment(yaml, "t.yaml", s, tmp.path(), ports);
    return YAML::Load(d.config_yaml)["worker"]["streams_per_server"];
  };
  // global-3's longest round trip, 239 ms, at 1 Gbit/s over 3 MiB windows: ceil(9.5) = 10.
  CHECK(streams_of(kThreeRegions).as<uint32_t>() == 10);
  std::string set = kThreeRegions;
  set.replace(set.find("rounds: 3"), 9, "rounds: 3, streams_per_server: auto");
  CHECK(streams_of(set).as<uint32_t>() == 10);
  set.replace(set.find("streams_per_server: auto"), 24, "streams_per_server: 3");
  CHECK(streams_of(set).as<uint32_t>() == 3);  // a number given is kept
  // No WAN: the workers measure for themselves (auto stays unset).
  CHECK_FALSE(streams_of("regions: [solo]\nworker: {workers_per_region: 1}\n"));
}
