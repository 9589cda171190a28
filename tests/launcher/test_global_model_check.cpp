// check_global_model (launcher/report/global_model_check.hpp): the servers' and the leaders'
// hashes of the final global model, compared, from run folders written here.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>

#include "launcher/report/global_model_check.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain::launcher;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
void append(const fs::path& file, const json& e) {
  std::ofstream(file, std::ios::app) << e.dump() << "\n";
}

// Server `server` released `shards` (id -> hash) at the end.
void server_released(const fs::path& dir, const std::string& server,
                     const std::map<int, std::string>& shards) {
  const auto file = dir / fmt::format("server-{}.metrics.jsonl", server);
  append(file, {{"event", "stats"}, {"t", 1.0}});
  for (const auto& [id, hash] : shards)
    append(file,
           {{"event", "flush"}, {"shard", id}, {"regions", 2}, {"version", 9}, {"hash", hash}});
}

// Region `region`'s leader flushed and pulled `shards`.
void leader_flushed(const fs::path& dir, const std::string& region,
                    const std::map<std::string, std::string>& shards) {
  const auto file = dir / fmt::format("worker-{}-0.metrics.jsonl", region);
  append(file, {{"event", "round"}, {"round", 3}});
  append(
      file,
      {{"event", "flush"}, {"region", region}, {"global_model", true}, {"shard_hashes", shards}});
}

const std::map<std::string, std::string> kPulled{{"0", "00000000000000aa"},
                                                 {"1", "00000000000000bb"}};
}  // namespace

TEST_CASE("a run whose regions pulled what their servers released holds one global model") {
  geotrain::test::TempDir tmp("gm-same");
  server_released(tmp.path(), "a", {{0, "00000000000000aa"}});
  server_released(tmp.path(), "b", {{1, "00000000000000bb"}});
  leader_flushed(tmp.path(), "a", kPulled);
  leader_flushed(tmp.path(), "b", kPulled);
  const auto c = check_global_model(tmp.path(), {"a", "b"});
  REQUIRE(c.identical.has_value());
  CHECK(*c.identical);
  CHECK(c.detail == "2 shard(s) identical in 2 region(s) and on their 2 server(s)");
}

TEST_CASE("one shard pulled differently by one region is named, with both hashes") {
  geotrain::test::TempDir tmp("gm-differ");
  server_released(tmp.path(), "a", {{0, "00000000000000aa"}, {1, "00000000000000bb"}});
  leader_flushed(tmp.path(), "a", kPulled);
  leader_flushed(tmp.path(), "b", {{"0", "00000000000000aa"}, {"1", "00000000000000bc"}});
  const auto c = check_global_model(tmp.path(), {"a", "b"});
  REQUIRE(c.identical.has_value());
  CHECK_FALSE(*c.identical);
  CHECK(c.detail == "shard 1: region b holds 00000000000000bc, server a released 00000000000000bb");
}

TEST_CASE("a region without the global model, or a shard no server released, is a difference") {
  geotrain::test::TempDir tmp("gm-missing");
  server_released(tmp.path(), "a", {{0, "00000000000000aa"}});
  leader_flushed(tmp.path(), "a", kPulled);  // shard 1: released by no server
  append(tmp.path() / "worker-b-0.metrics.jsonl",
         {{"event", "flush"}, {"region", "b"}, {"global_model", false}, {"error", "timed out"}});
  const auto c = check_global_model(tmp.path(), {"a", "b"});
  REQUIRE(c.identical.has_value());
  CHECK_FALSE(*c.identical);
  CHECK(c.detail.find("region b holds no global model: timed out") != std::string::npos);
  CHECK(c.detail.find("shard 1: region a pulled it, no server logged its release") !=
        std::string::npos);
}

TEST_CASE("a run stopped before its end, or written without hashes, has nothing to compare") {
  geotrain::test::TempDir tmp("gm-none");
  append(tmp.path() / "worker-a-0.metrics.jsonl", {{"event", "round"}, {"round", 3}});
  auto c = check_global_model(tmp.path(), {"a"});
  CHECK_FALSE(c.identical.has_value());
  CHECK(c.detail.find("no region flushed") != std::string::npos);

  append(tmp.path() / "worker-a-0.metrics.jsonl",
         {{"event", "flush"}, {"region", "a"}, {"global_model", true}});
  append(tmp.path() / "server-a.metrics.jsonl", {{"event", "flush"}, {"shard", 0}, {"version", 2}});
  c = check_global_model(tmp.path(), {"a"});
  CHECK_FALSE(c.identical.has_value());
  CHECK(c.detail.find("a build from before them") != std::string::npos);
}
