#include "netsim/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/yaml_reader.hpp"
#include "netsim/socket.hpp"

namespace geotrain::netsim {

namespace {

// A YAML node with the path that led to it ("links[2].delay_ms"), for error messages. The typed
// reads and the key checks are core/yaml_reader.hpp's, with the rules every other config reader
// uses; a Field adds the path through lists and the profile's own checks (fail()).
struct Field {
  YAML::Node node;
  std::string path;  // e.g. "links[2].delay_ms"
  const YamlReader* in;

  Field child(const std::string& key) const {
    return {node[key], path.empty() ? key : path + "." + key, in};
  }
  Field item(std::size_t i) const { return {node[i], fmt::format("{}[{}]", path, i), in}; }
  bool present() const { return node.IsDefined() && !node.IsNull(); }
  std::string text() const {
    if (node.IsScalar()) return node.Scalar();
    std::ostringstream s;
    s << YAML::Dump(node);
    return s.str();
  }
  [[noreturn]] void fail(const std::string& allowed) const {
    const std::string name = path.empty() ? "the document" : path;
    if (!present())
      throw InputError(fmt::format("{}: {} is missing: {}", in->source(), name, allowed));
    throw InputError(fmt::format("{}: {} is '{}': {}", in->source(), name, text(), allowed));
  }

  void require_map(const std::set<std::string>& allowed_keys) const {
    if (!present()) fail("must be a mapping");
    in->check_keys(node, path, allowed_keys);
  }
  std::string string() const {
    if (!present()) fail("must be a string");
    return in->string(node, path);
  }
  double number(double min, double max) const {
    if (!present()) fail(fmt::format("must be a number in [{}, {}]", min, max));
    return in->number<double>(node, path, min, max);
  }
  bool boolean() const {
    if (!present()) fail("must be true or false");
    return in->boolean(node, path);
  }
  std::vector<Field> sequence() const {
    if (!present() || !node.IsSequence()) fail("must be a list");
    std::vector<Field> out;
    for (std::size_t i = 0; i < node.size(); ++i) out.push_back(item(i));
    return out;
  }
};

constexpr double kMaxMs = 60'000;
constexpr double kMaxMbps = 1'000'000;
const std::set<std::string> kPropertyKeys = {"delay_ms",       "jitter_ms", "jitter_distribution",
                                             "bandwidth_mbps", "burst_kib", "window_kib"};

// Reads whichever property keys are present in f into p.
void read_properties(const Field& f, LinkProperties& p) {
  if (auto v = f.child("delay_ms"); v.present()) p.delay_ms = v.number(0, kMaxMs);
  if (auto v = f.child("jitter_ms"); v.present()) p.jitter_ms = v.number(0, kMaxMs);
  if (auto v = f.child("jitter_distribution"); v.present()) {
    const auto s = v.string();
    if (s == "uniform")
      p.jitter_distribution = JitterDistribution::uniform;
    else if (s == "normal")
      p.jitter_distribution = JitterDistribution::normal;
    else
      v.fail("must be uniform or normal");
  }
  if (auto v = f.child("bandwidth_mbps"); v.present()) p.bandwidth_mbps = v.number(0, kMaxMbps);
  if (auto v = f.child("burst_kib"); v.present()) p.burst_kib = v.number(0, 1 << 20);
  if (auto v = f.child("window_kib"); v.present()) p.window_kib = v.number(0, 1 << 20);
  if (p.window_kib > 0 && p.window_kib < 1) f.child("window_kib").fail("must be 0 (none) or >= 1");
}

std::set<std::string> with(std::set<std::string> keys, std::initializer_list<const char*> more) {
  for (const char* k : more) keys.insert(k);
  return keys;
}

// Not valid YAML, or a key written twice in one mapping: an InputError naming `where`.
YAML::Node load_yaml(const std::string& text, const std::string& where) {
  return parse_yaml(text, where);
}

std::string read_file(const std::filesystem::path& file, const char* what) {
  std::ifstream in(file);
  GT_REQUIRE(in.good(), "{} file '{}' cannot be read", what, file.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

WanProfile profile_from(const Field& root) {
  root.require_map({"name", "description", "regions", "defaults", "links"});
  WanProfile prof;
  prof.name = root.child("name").string();
  if (auto d = root.child("description"); d.present()) prof.description = d.string();
  // `regions` may be left out when a `between: any` entry covers every pair; the listed links
  // may then name any regions.
  const auto link_fields = root.child("links").sequence();
  const bool has_any_pair = std::any_of(link_fields.begin(), link_fields.end(), [](const Field& l) {
    const auto b = l.child("between");
    return b.present() && b.node.IsScalar() && b.node.Scalar() == "any";
  });
  std::set<std::string> regions;
  const bool regions_given = root.child("regions").present() || !has_any_pair;
  if (regions_given) {
    for (const Field& r : root.child("regions").sequence()) {
      auto name = r.string();
      if (name.empty() || name.find("->") != std::string::npos)
        r.fail("must be a non-empty name without '->'");
      if (!regions.insert(name).second) r.fail("is listed twice");
      prof.regions.push_back(name);
    }
    if (prof.regions.empty()) root.child("regions").fail("must name at least one region");
  }
  LinkProperties defaults;
  if (auto d = root.child("defaults"); d.present()) {
    d.require_map(kPropertyKeys);
    read_properties(d, defaults);
  }
  auto region = [&](const Field& f) {
    auto name = f.string();
    if (regions_given && !regions.count(name)) f.fail("is not one of the profile's regions");
    if (name.empty() || name.find("->") != std::string::npos)
      f.fail("must be a non-empty name without '->'");
    return name;
  };
  for (const Field& l : link_fields) {
    l.require_map(with(kPropertyKeys, {"between", "from", "to"}));
    LinkProperties p = defaults;
    read_properties(l, p);
    std::vector<std::pair<std::string, std::string>> pairs;
    if (auto b = l.child("between"); b.present()) {
      if (l.child("from").present() || l.child("to").present())
        b.fail("give either between: [A, B] (or between: any) or from: A and to: B, not both");
      if (b.node.IsScalar()) {
        if (b.node.Scalar() != "any")
          b.fail("must be a list of two regions, or 'any' (every pair no other entry lists)");
        if (prof.any_pair) b.fail("between: any is given twice");
        prof.any_pair = p;
        continue;
      }
      auto ends = b.sequence();
      if (ends.size() != 2) b.fail("must list exactly two regions");
      auto a = region(ends[0]), z = region(ends[1]);
      if (a == z) b.fail("must name two different regions");
      pairs = {{a, z}, {z, a}};
    } else {
      auto a = region(l.child("from")), z = region(l.child("to"));
      if (a == z) l.child("to").fail("must differ from 'from'");
      pairs = {{a, z}};
    }
    for (auto& pr : pairs) {
      if (prof.links.count(pr))
        l.fail(fmt::format("link {}->{} is defined twice", pr.first, pr.second));
      prof.links[pr] = p;
    }
  }
  return prof;
}

Fault fault_from(const Field& f) {
  f.require_map(
      {"kind", "at_s", "until_s", "delay_ms", "jitter_ms", "bandwidth_mbps", "window_kib"});
  Fault fault;
  const auto kind = f.child("kind");
  const auto k = kind.string();
  if (k == "partition")
    fault.kind = FaultKind::partition;
  else if (k == "reset")
    fault.kind = FaultKind::reset;
  else if (k == "set")
    fault.kind = FaultKind::set;
  else if (k == "blackhole")
    fault.kind = FaultKind::blackhole;
  else
    kind.fail("must be partition, reset, set or blackhole");
  fault.at_s = f.child("at_s").number(0, 1e9);
  if (auto u = f.child("until_s"); u.present()) {
    if (fault.kind == FaultKind::reset || fault.kind == FaultKind::set)
      u.fail(fmt::format("a {} fault happens at one time and takes no until_s", k));
    fault.until_s = u.number(fault.at_s, 1e9);
    if (*fault.until_s <= fault.at_s) u.fail("must be after at_s");
  } else if (fault.kind == FaultKind::partition) {
    f.child("until_s").fail("a partition needs until_s (seconds from start)");
  }
  bool any = false;
  auto opt = [&](const char* key, std::optional<double>& out, double max) {
    if (auto v = f.child(key); v.present()) {
      if (fault.kind != FaultKind::set) v.fail("only a 'set' fault changes properties");
      out = v.number(0, max);
      any = true;
    }
  };
  opt("delay_ms", fault.delay_ms, kMaxMs);
  opt("jitter_ms", fault.jitter_ms, kMaxMs);
  opt("bandwidth_mbps", fault.bandwidth_mbps, kMaxMbps);
  opt("window_kib", fault.window_kib, 1 << 20);
  if (fault.kind == FaultKind::set && !any)
    kind.fail(
        "a set fault must change at least one of delay_ms, jitter_ms, bandwidth_mbps, window_kib");
  return fault;
}

}  // namespace

const LinkProperties* WanProfile::find_link(const std::string& from, const std::string& to) const {
  if (auto it = links.find({from, to}); it != links.end()) return &it->second;
  return any_pair ? &*any_pair : nullptr;
}

const LinkProperties& WanProfile::link(const std::string& from, const std::string& to) const {
  if (const auto* p = find_link(from, to)) return *p;
  std::string listed;
  for (const auto& [pair, _] : links)
    listed += (listed.empty() ? "" : ", ") + pair.first + "->" + pair.second;
  throw InputError(fmt::format(
      "WAN profile '{}' has no link {}->{} (it lists {}; a 'between: any' entry would cover "
      "every other pair)",
      name, from, to, listed.empty() ? "none" : listed));
}

WanProfile parse_profile(const std::string& yaml_text, const std::string& where) try {
  const YamlReader in(where);
  return profile_from({load_yaml(yaml_text, where), "", &in});
} catch (const YAML::Exception& e) {  // a check is missing: still an InputError
  throw InputError(fmt::format("{}: not a valid config: {}", where, e.what()));
}

WanProfile load_profile(const std::filesystem::path& file) {
  return parse_profile(read_file(file, "WAN profile"), file.string());
}

NetsimConfig parse_netsim_config(const std::string& yaml_text, const std::string& where,
                                 const std::filesystem::path& base_dir) try {
  const YamlReader in(where);
  const Field root{load_yaml(yaml_text, where), "", &in};
  root.require_map({"profile", "seed", "stats", "faults_origin_unix_s", "links"});
  NetsimConfig cfg;
  const Field prof = root.child("profile");
  if (!prof.present()) prof.fail("a WAN profile file path or an inline profile mapping");
  if (prof.node.IsScalar()) {
    std::filesystem::path p = prof.string();
    if (p.is_relative()) p = base_dir / p;
    // The overload that reports through an error code: a name the file system refuses (longer
    // than NAME_MAX, say) is a bad config, not a std::filesystem_error.
    std::error_code ec;
    const bool found = std::filesystem::exists(p, ec);
    if (ec) prof.fail(fmt::format("cannot be looked up ({}): {}", p.string(), ec.message()));
    if (!found) prof.fail(fmt::format("no such file ({})", p.string()));
    cfg.profile = load_profile(p);
  } else if (prof.node.IsMap()) {
    cfg.profile = profile_from(prof);
  } else {
    prof.fail("must be a profile file path or an inline profile mapping");
  }
  if (auto s = root.child("seed"); s.present())
    cfg.options.seed = static_cast<uint64_t>(s.number(0, 9007199254740992.0));
  if (auto o = root.child("faults_origin_unix_s"); o.present())
    cfg.options.faults_origin_unix_s = o.number(0, 1e11);
  if (auto s = root.child("stats"); s.present()) {
    s.require_map({"jsonl", "interval_s", "log"});
    if (auto j = s.child("jsonl"); j.present()) {
      std::filesystem::path p = j.string();
      cfg.options.stats_jsonl = p.is_relative() ? base_dir / p : p;
    }
    cfg.options.stats_interval_s = 1.0;
    if (auto i = s.child("interval_s"); i.present())
      cfg.options.stats_interval_s = i.number(0.01, 3600);
    if (auto l = s.child("log"); l.present()) cfg.options.log_stats = l.boolean();
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (const Field& l : root.child("links").sequence()) {
    l.require_map(
        with(kPropertyKeys, {"from", "to", "listen", "target", "faults", "capture_file"}));
    LinkConfig link;
    link.from = l.child("from").string();
    link.to = l.child("to").string();
    try {
      link.properties = cfg.profile.link(link.from, link.to);
    } catch (const InputError& e) {
      l.child("to").fail(e.what());  // names the profile, the pair, and what it does list
    }
    if (!seen.insert({link.from, link.to}).second) l.fail("this link is listed twice");
    read_properties(l, link.properties);  // per-link overrides
    link.listen = parse_endpoint(l.child("listen").string(), where + ": " + l.path + ".listen");
    link.target = parse_endpoint(l.child("target").string(), where + ": " + l.path + ".target");
    if (auto f = l.child("faults"); f.present())
      for (const Field& item : f.sequence()) link.faults.push_back(fault_from(item));
    if (auto c = l.child("capture_file"); c.present()) {
      std::filesystem::path p = c.string();
      link.capture_file = p.is_relative() ? base_dir / p : p;
    }
    cfg.links.push_back(std::move(link));
  }
  if (cfg.links.empty()) root.child("links").fail("must list at least one link");
  return cfg;
} catch (const YAML::Exception& e) {  // a check is missing: still an InputError
  throw InputError(fmt::format("{}: not a valid config: {}", where, e.what()));
}

NetsimConfig load_netsim_config(const std::filesystem::path& file) {
  return parse_netsim_config(read_file(file, "netsim config"), file.string(), file.parent_path());
}

}  // namespace geotrain::netsim
