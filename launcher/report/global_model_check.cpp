#include "launcher/report/global_model_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>

#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kDifferencesShown = 5;

// A shard's hash as its server logged it when it released the shard's flush.
struct Released {
  std::string hash;
  std::string server;  // the server's region
};

// Every server's released shards: the last release of each (a server restarted from its
// checkpoint after the end may release a shard again). A standby that served shards at the end
// (server.standby) released them in its own file, standby-<region>.metrics.jsonl.
std::map<std::string, Released> released_shards(const fs::path& run_dir) {
  std::map<std::string, Released> out;
  std::error_code ec;
  std::set<fs::path> files;  // in name order: the same answer on every file system
  const std::string tail = ".metrics.jsonl";
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const auto name = e.path().filename().string();
    if ((name.starts_with("server-") || name.starts_with("standby-")) && name.ends_with(tail))
      files.insert(e.path());
  }
  for (const auto& file : files) {
    const auto name = file.filename().string();
    const bool standby = name.starts_with("standby-");
    const size_t head = standby ? 8 : 7;
    const auto server =
        name.substr(head, name.size() - head - tail.size()) + (standby ? " (standby)" : "");
    for (const auto& e : read_jsonl(file)) {
      if (e.value("event", "") != "flush" || !e.contains("hash") || !e["hash"].is_string() ||
          !e.contains("shard") || !e["shard"].is_number_unsigned())
        continue;
      out[std::to_string(e["shard"].get<uint64_t>())] = {e["hash"].get<std::string>(), server};
    }
  }
  return out;
}

// The leader's last `flush` event (a leader restarted after the end flushes again).
std::optional<json> last_flush(const fs::path& run_dir, const std::string& region) {
  std::optional<json> out;
  for (auto& e : read_jsonl(run_dir / fmt::format("worker-{}-0.metrics.jsonl", region)))
    if (e.value("event", "") == "flush") out = std::move(e);
  return out;
}

// The differences between a region's hashes and the servers'.
void compare(const std::string& region, const json& hashes,
             const std::map<std::string, Released>& servers, std::vector<std::string>& diffs) {
  for (const auto& [shard, r] : servers) {
    if (!hashes.contains(shard) || !hashes[shard].is_string())
      diffs.push_back(fmt::format("region {} has no hash of shard {}", region, shard));
    else if (hashes[shard].get<std::string>() != r.hash)
      diffs.push_back(fmt::format("shard {}: region {} holds {}, server {} released {}", shard,
                                  region, hashes[shard].get<std::string>(), r.server, r.hash));
  }
  for (const auto& [shard, h] : hashes.items())
    if (!servers.count(shard))
      diffs.push_back(fmt::format("shard {}: region {} pulled it, no server logged its release",
                                  shard, region));
}

}  // namespace

GlobalModelCheck check_global_model(const fs::path& run_dir,
                                    const std::vector<std::string>& regions) {
  GlobalModelCheck out;
  std::map<std::string, json> flushes;
  for (const auto& r : regions)
    if (auto f = last_flush(run_dir, r)) flushes.emplace(r, std::move(*f));
  if (flushes.empty()) {
    out.detail = "no region flushed (the run stopped before its last round)";
    return out;
  }
  std::vector<std::string> diffs;
  for (const auto& r : regions) {
    const auto it = flushes.find(r);
    if (it == flushes.end())
      diffs.push_back(fmt::format("region {} did not flush", r));
    else if (!it->second.value("global_model", false))
      diffs.push_back(fmt::format("region {} holds no global model: {}", r,
                                  it->second.value("error", std::string("its flush failed"))));
  }
  const auto servers = released_shards(run_dir);
  for (const auto& [r, f] : flushes) {
    if (!f.value("global_model", false)) continue;
    if (!f.contains("shard_hashes") || !f["shard_hashes"].is_object() || servers.empty()) {
      out.detail = fmt::format(
          "no hashes to compare ({}): a build from before them",
          servers.empty() ? "the servers logged none" : "region " + r + "'s flush has none");
      return out;
    }
    compare(r, f["shard_hashes"], servers, diffs);
  }
  out.identical = diffs.empty();
  if (diffs.empty()) {
    std::set<std::string> on;
    for (const auto& [shard, r] : servers) on.insert(r.server);
    out.detail = fmt::format("{} shard(s) identical in {} region(s) and on their {} server(s)",
                             servers.size(), regions.size(), on.size());
  } else {
    const size_t shown = std::min(diffs.size(), kDifferencesShown);
    out.detail = fmt::format(
        "{}{}", fmt::join(diffs.begin(), diffs.begin() + shown, "; "),
        diffs.size() > shown ? fmt::format(" (and {} more)", diffs.size() - shown) : std::string());
  }
  return out;
}

}  // namespace geotrain::launcher
