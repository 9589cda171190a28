#include "core/deployment_keys.hpp"

#include <algorithm>
#include <set>

namespace geotrain {

std::vector<std::string> read_regions(const YamlReader& in, const YAML::Node& root) {
  GT_REQUIRE(root["regions"], "{}: key 'regions' is missing (a list of region names)", in.source());
  auto regions = in.strings(root["regions"], "regions");
  GT_REQUIRE(!regions.empty() && regions.size() <= kMaxRegions,
             "{}: regions has {} entries, allowed: 1 to {}", in.source(), regions.size(),
             kMaxRegions);
  std::set<std::string> seen;
  for (const auto& r : regions)
    GT_REQUIRE(seen.insert(r).second, "{}: regions lists '{}' twice", in.source(), r);
  return regions;
}

std::map<std::string, std::string> read_endpoints(const YamlReader& in, const YAML::Node& endpoints,
                                                  const std::vector<std::string>& regions) {
  GT_REQUIRE(endpoints.IsMap(), "{}: server.endpoints must map region names to endpoints",
             in.source());
  in.check_keys(endpoints, "server.endpoints",
                std::set<std::string>(regions.begin(), regions.end()));
  std::map<std::string, std::string> out;
  for (const auto& kv : endpoints) {
    const auto region = kv.first.as<std::string>();
    out[region] = in.string(kv.second, "server.endpoints." + region);
  }
  return out;
}

const std::set<std::string>& model_keys() {
  static const std::set<std::string> keys{"tensors", "critical", "kind",     "arch",
                                          "preset",  "vocab",    "d_model",  "layers",
                                          "heads",   "seq_len",  "mlp_ratio"};
  return keys;
}

std::vector<TensorSpec> read_model_tensors(const YamlReader& in, const YAML::Node& tensors) {
  GT_REQUIRE(tensors.IsSequence(), "{}: model.tensors must be a list of {{name, size}}",
             in.source());
  std::vector<TensorSpec> out;
  for (const auto& t : tensors) {
    in.check_keys(t, "model.tensors[]", {"name", "size"});
    GT_REQUIRE(t["name"] && t["size"], "{}: every model.tensors entry needs name and size",
               in.source());
    out.push_back({in.string(t["name"], "model.tensors[].name"),
                   in.number<uint64_t>(t["size"], "model.tensors[].size", 1, uint64_t{1} << 36)});
  }
  return out;
}

void check_critical_globs(const YamlReader& in, const std::vector<std::string>& critical,
                          const std::vector<TensorSpec>& tensors) {
  constexpr std::size_t kNamesShown = 8;  // a GPT has hundreds of tensors
  for (const auto& glob : critical) {
    const bool matches = std::any_of(tensors.begin(), tensors.end(),
                                     [&](const TensorSpec& t) { return glob_match(glob, t.name); });
    if (matches) continue;
    std::string names;
    for (std::size_t i = 0; i < std::min(tensors.size(), kNamesShown); ++i)
      names += (names.empty() ? "" : ", ") + tensors[i].name;
    if (tensors.size() > kNamesShown)
      names += fmt::format(", and {} more", tensors.size() - kNamesShown);
    GT_REQUIRE(false,
               "{}: model.critical has '{}', which matches no tensor of the model (its tensors: "
               "{}); allowed: globs over these names ('*' any run of characters, '?' one)",
               in.source(), glob, names.empty() ? "none" : names);
  }
}

}  // namespace geotrain
