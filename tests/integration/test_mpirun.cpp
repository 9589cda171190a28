// Launched by Open MPI's `mpirun`, as docs/deploy.md says ("With `mpirun` the same two commands
// work"): one `mpirun` starts the three servers (rank r serves region r) and another the six
// workers (rank g is rank g % 2 of region g / 2), every process finding its place from
// OMPI_COMM_WORLD_RANK, with no --region or --rank. The trained parameters must equal, bit for
// bit, those of the same config started by hand with --region and --rank: a rank mapped to the
// wrong region or rank fails here (a worker in the wrong region trains another region's data and
// meets another group).
//
// Needs `mpirun` (Debian's openmpi-bin, which the test command's set-up installs); without it
// every test here exits 77, which ctest reports as SKIPPED, with the reason on stdout.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "deployment.hpp"
#include "temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

// mpirun's own flags: root is refused unless allowed, and a 2-core machine runs 6 workers.
std::vector<std::string> mpirun(size_t ranks) {
  return {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "-np",    std::to_string(ranks)};
}

}  // namespace

TEST_CASE(
    "mpirun launches the servers and the workers from their ranks; the same model as by hand") {
  TempDir dir("mpirun");
  const auto endpoints = loopback_endpoints();
  const auto launched = dir.path() / "mpirun", by_hand = dir.path() / "by-hand";
  std::filesystem::create_directories(launched);

  const auto config = launched / "geo.yaml";
  std::ofstream(config) << deployment_config(launched, endpoints, "127.0.0.1", 1);
  {
    Process servers({"server", "--config", config.string()}, launched / "servers.log",
                    mpirun(kRegions.size()));
    Process workers({"worker", "--config", config.string()}, launched / "workers.log",
                    mpirun(2 * kRegions.size()));
    const auto code = workers.wait(180s);
    REQUIRE_MESSAGE(code.value_or(-1) == 0, "mpirun's workers failed:\n", workers.log(),
                    "\nservers:\n", servers.log());
    servers.terminate();  // mpirun passes SIGTERM on to its servers
    CHECK(servers.wait(30s).has_value());
  }
  for (const auto& r : kRegions) {
    // Each region's leader wrote its metrics under its own name: the rank found its region.
    const auto rounds = events(launched / fmt::format("worker-{}-0.metrics.jsonl", r), "round");
    CHECK_MESSAGE(rounds.size() == 6, "region ", r);
    CHECK(std::filesystem::exists(launched / fmt::format("worker-{}-1.metrics.jsonl", r)));
  }

  check_same_as_by_hand(launched, by_hand, "mpirun");
}

int main(int argc, char** argv) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    std::printf("SKIPPED: mpirun is not installed (Debian's openmpi-bin; scripts/bootstrap.sh)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
