#include "core/deployment_keys.hpp"

#include <algorithm>
#include <set>

#include "core/endpoint.hpp"

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
                                                  const std::vector<std::string>& regions,
                                                  const std::string& key) {
  GT_REQUIRE(endpoints.IsMap(), "{}: {} must map region names to endpoints", in.source(), key);
  in.check_keys(endpoints, key, std::set<std::string>(regions.begin(), regions.end()));
  std::map<std::string, std::string> out;
  for (const auto& kv : endpoints) {
    const auto region = kv.first.as<std::string>();
    out[region] = in.string(kv.second, key + "." + region);
    require_endpoint(out[region], in.source() + ": " + key + "." + region);
  }
  return out;
}

StandbySettings read_standby(const YamlReader& in, const YAML::Node& server,
                             const std::vector<std::string>& regions) {
  StandbySettings out;
  const YAML::Node n = server && server.IsMap() ? server["standby"] : YAML::Node();
  if (!n) return out;
  if (n.IsScalar()) {
    const auto v = in.string(n, "server.standby");
    GT_REQUIRE(v == "on" || v == "off",
               "{}: server.standby is '{}', allowed: on, off, or a mapping {{endpoints, "
               "every_rounds, takeover_after_ms, codec, anchor_every}}",
               in.source(), v);
    out.on = v == "on";
  } else {
    GT_REQUIRE(n.IsMap(), "{}: server.standby must be on, off or a mapping", in.source());
    in.check_keys(n, "server.standby",
                  {"endpoints", "every_rounds", "takeover_after_ms", "codec", "anchor_every"});
    out.on = true;
    if (auto e = n["endpoints"])
      out.endpoints = read_endpoints(in, e, regions, "server.standby.endpoints");
    if (auto k = n["every_rounds"])
      out.every_rounds = in.number<uint64_t>(k, "server.standby.every_rounds", 1, 1000000);
    if (auto k = n["codec"]) out.codec = in.string(k, "server.standby.codec");
    if (auto k = n["anchor_every"])
      out.anchor_every = in.number<uint64_t>(k, "server.standby.anchor_every", 1, 1000000);
    if (auto k = n["takeover_after_ms"])
      out.takeover_after = std::chrono::milliseconds(
          in.number<int64_t>(k, "server.standby.takeover_after_ms", 1, 3600000));
  }
  GT_REQUIRE(!out.on || regions.size() >= 2,
             "{}: server.standby needs two regions or more (a region's standby is in the next "
             "region's server); this config has one",
             in.source());
  return out;
}

const std::set<std::string>& model_keys() {
  static const std::set<std::string> keys{"tensors", "critical", "kind",     "arch",
                                          "preset",  "vocab",    "d_model",  "layers",
                                          "heads",   "seq_len",  "mlp_ratio"};
  return keys;
}

std::vector<TensorSpec> read_model_tensors(const YamlReader& in, const YAML::Node& tensors) {
  GT_REQUIRE(tensors.IsSequence(), "{}: model.tensors must be a list of {{name, size[, cols]}}",
             in.source());
  std::vector<TensorSpec> out;
  for (const auto& t : tensors) {
    in.check_keys(t, "model.tensors[]", {"name", "size", "cols"});
    GT_REQUIRE(t["name"] && t["size"], "{}: every model.tensors entry needs name and size",
               in.source());
    TensorSpec spec{in.string(t["name"], "model.tensors[].name"),
                    in.number<uint64_t>(t["size"], "model.tensors[].size", 1, uint64_t{1} << 36)};
    // cols: the tensor is a matrix of this many columns (its last dimension), for powersgd.
    if (auto cols = t["cols"]) {
      spec.cols = in.number<uint64_t>(cols, "model.tensors[].cols", 1, spec.size);
      GT_REQUIRE(spec.size % spec.cols == 0,
                 "{}: model.tensors: '{}' of size {} is not a matrix of {} columns (cols must "
                 "divide size)",
                 in.source(), spec.name, spec.size, spec.cols);
    }
    out.push_back(std::move(spec));
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

SharedProtocol read_shared_protocol(const YamlReader& in, const YAML::Node& root) {
  SharedProtocol p;
  if (auto s = root["server"]; s && s.IsMap()) {
    if (auto n = s["staleness_bound"])
      p.staleness_bound = in.number<uint32_t>(n, "server.staleness_bound", 0, 1000);
    if (auto o = s["optimizer"]) {
      in.check_keys(o, "server.optimizer", {"lr", "momentum", "nesterov"});
      if (auto n = o["lr"]) p.outer.lr = in.number<float>(n, "server.optimizer.lr", 1e-6f, 100.0f);
      if (auto n = o["momentum"])
        p.outer.momentum = in.number<float>(n, "server.optimizer.momentum", 0.0f, 0.999f);
      if (auto n = o["nesterov"]) p.outer.nesterov = in.boolean(n, "server.optimizer.nesterov");
    }
  }
  if (auto w = root["worker"]; w && w.IsMap()) {
    if (auto n = w["fragments"]) p.fragments = in.number<uint32_t>(n, "worker.fragments", 1, 1024);
    if (auto n = w["stream_critical"]) p.stream_critical = in.boolean(n, "worker.stream_critical");
  }
  return p;
}

}  // namespace geotrain
