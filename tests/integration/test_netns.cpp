// Regions on separate hosts: each region's server and workers in a Linux network namespace of
// their own, with their own address, joined by veth pairs to a bridge (made and removed here),
// from one config as docs/deploy.md says: servers bound to their namespace's address, every
// region's workers with their own `gloo_host` (a copy of the config differing in that key only),
// leaders striping over 4 connections per server. The trained parameters must equal, bit for
// bit, those of the same config on loopback with one plain connection per server: where the
// processes run and how the bytes travel must not change the model.
//
// Needs root and `ip` (iproute2); otherwise every test here exits 77, which ctest reports as
// SKIPPED, with the reason on stdout.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "cluster.hpp"
#include "deployment.hpp"
#include "process.hpp"
#include "temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Namespaces `<tag>h` (a bridge) and `<tag>0..`, region i at 10.231.0.(i + 1)/24.
class Hosts {
 public:
  explicit Hosts(size_t n) : tag_(fmt::format("gt{}", ::getpid() % 100000)) {
    const std::string hub = tag_ + "h";
    ok_ = sh("ip netns add " + hub) == 0;
    ok_ = ok_ && sh(fmt::format("ip -n {0} link add br0 type bridge && ip -n {0} link set br0 up "
                                "&& ip -n {0} link set lo up",
                                hub)) == 0;
    for (size_t i = 0; ok_ && i < n; ++i) {
      const std::string ns = fmt::format("{}{}", tag_, i), a = ns + "a", b = ns + "b";
      ok_ = sh("ip netns add " + ns) == 0 &&
            sh(fmt::format("ip link add {} type veth peer name {}", a, b)) == 0 &&
            sh(fmt::format("ip link set {} netns {} && ip link set {} netns {}", a, ns, b, hub)) ==
                0 &&
            sh(fmt::format("ip -n {0} addr add {1}/24 dev {2} && ip -n {0} link set {2} up && "
                           "ip -n {0} link set lo up",
                           ns, address(i), a)) == 0 &&
            sh(fmt::format("ip -n {0} link set {1} master br0 && ip -n {0} link set {1} up", hub,
                           b)) == 0;
      made_ = i + 1;
    }
  }
  ~Hosts() {
    for (size_t i = 0; i < made_; ++i) sh(fmt::format("ip netns del {}{}", tag_, i));
    sh("ip netns del " + tag_ + "h");
  }
  bool ok() const { return ok_; }
  std::string ns(size_t i) const { return fmt::format("{}{}", tag_, i); }
  static std::string address(size_t i) { return fmt::format("10.231.0.{}", i + 1); }

 private:
  std::string tag_;
  bool ok_ = false;
  size_t made_ = 0;
};

}  // namespace

TEST_CASE("regions in their own network namespaces train as on loopback, bit for bit") {
  Hosts hosts(kRegions.size());
  REQUIRE_MESSAGE(hosts.ok(), "the namespaces could not be made (checked in main)");
  TempDir dir("netns");
  std::vector<std::string> apart;
  for (size_t i = 0; i < kRegions.size(); ++i)
    apart.push_back(fmt::format("tcp://{}:7101", Hosts::address(i)));
  const auto split = dir.path() / "apart", local = dir.path() / "loopback";
  std::filesystem::create_directories(split);
  std::filesystem::create_directories(local);
  run_by_hand(
      split, apart,
      [&](size_t i) {
        return std::vector<std::string>{"ip", "netns", "exec", hosts.ns(i)};
      },
      [](size_t i) { return Hosts::address(i); }, 4);
  run_by_hand(
      local, loopback_endpoints(), [](size_t) { return std::vector<std::string>{}; },
      [](size_t) { return std::string("127.0.0.1"); }, 1);
  check_same_model(split, local, "namespaces and loopback");
  const auto rounds = events(split / "worker-b-0.metrics.jsonl", "round");
  REQUIRE(rounds.size() == 6);
  CHECK(rounds.back()["bytes_pushed"].get<uint64_t>() > 0);
}

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::printf("SKIPPED: network namespaces need root\n");
    return 77;
  }
  {
    Hosts probe(1);
    if (!probe.ok()) {
      std::printf("SKIPPED: `ip netns add` or a veth pair failed here (no CAP_NET_ADMIN?)\n");
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
