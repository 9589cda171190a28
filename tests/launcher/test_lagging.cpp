// Choosing the tensors that may lag from a run's tensor_motion events
// (launcher/report/lagging_tensors.hpp): the choice in closed form, the leaders' figures averaged,
// and the refusals that name what is wrong.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>

#include "core/error.hpp"
#include "launcher/report/lagging_tensors.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
namespace fs = std::filesystem;

namespace {

std::string motion_line(const std::vector<std::pair<std::string, double>>& tensors,
                        uint64_t elements = 10) {
  std::string line = R"({"event":"tensor_motion","time":1.0,"region":"r","tensors":[)";
  for (size_t i = 0; i < tensors.size(); ++i)
    line += fmt::format(R"({}{{"name":"{}","elements":{},"critical":true,"relative_update":{}}})",
                        i ? "," : "", tensors[i].first, elements, tensors[i].second);
  return line + "]}\n";
}

}  // namespace

TEST_CASE("the tensors that move least lag, as long as they fit the share; a prefix of the rank") {
  const std::vector<launcher::TensorMotionRow> rows = {
      {"a", 40, 0.30}, {"b", 10, 0.01}, {"c", 30, 0.02}, {"d", 20, 0.50}};
  auto c = launcher::choose_lagging(rows, 0.5);  // b (10) + c (30) = 40 of 100; a would pass 50
  CHECK(c.lagging == std::vector<std::string>{"b", "c"});
  CHECK(c.critical == std::vector<std::string>{"a", "d"});
  CHECK(c.lagging_elements == 40);
  CHECK(c.total_elements == 100);
  // d (20) would fit beside b and c at 0.6, but a comes first in the rank and does not fit.
  CHECK(launcher::choose_lagging(rows, 0.6).lagging == std::vector<std::string>{"b", "c"});
  CHECK(launcher::choose_lagging(rows, 0.8).lagging == std::vector<std::string>{"b", "c", "a"});
  CHECK(launcher::choose_lagging(rows, 1.0).critical.empty());
  CHECK(launcher::choose_lagging(rows, 0.0).lagging.empty());
  CHECK_THROWS_WITH_AS(launcher::choose_lagging(rows, 1.5), doctest::Contains("--lag-share is 1.5"),
                       InputError);
}

TEST_CASE("a run's tensor motion is the mean of its leaders'; other workers and events ignored") {
  geotrain::test::TempDir tmp("lagging");
  const auto dir = tmp.path();
  std::ofstream(dir / "worker-a-0.metrics.jsonl") << R"({"event":"start","time":0.1})"
                                                  << "\n"
                                                  << motion_line({{"x", 0.1}, {"y", 0.4}});
  std::ofstream(dir / "worker-b-0.metrics.jsonl") << motion_line({{"x", 0.3}, {"y", 0.2}});
  std::ofstream(dir / "worker-b-1.metrics.jsonl") << motion_line({{"x", 9.0}, {"y", 9.0}});
  const auto rows = launcher::read_tensor_motion(dir);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].name == "x");
  CHECK(rows[0].relative_update == doctest::Approx(0.2));
  CHECK(rows[1].relative_update == doctest::Approx(0.3));
  CHECK(rows[1].elements == 10);

  std::ofstream(dir / "worker-c-0.metrics.jsonl") << motion_line({{"x", 0.3}, {"z", 0.2}});
  CHECK_THROWS_WITH_AS(launcher::read_tensor_motion(dir), doctest::Contains("tensor 1 of"),
                       InputError);
  geotrain::test::TempDir empty("lagging-none");
  std::ofstream(empty.path() / "worker-a-0.metrics.jsonl") << R"({"event":"start","time":0.1})";
  CHECK_THROWS_WITH_AS(launcher::read_tensor_motion(empty.path()),
                       doctest::Contains("no leader in"), InputError);
}
