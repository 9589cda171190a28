#include "launcher/sweep/sweep_plan.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/run_summary_keys.hpp"
#include "core/wan_profile.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/report/results_table.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/run_settings.hpp"
#include "netsim/config.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
std::string flow(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

void set_path(YAML::Node root, const std::string& path, const YAML::Node& value,
              const std::string& source) {
  set_config_path(std::move(root), path, value, source);
}

// The `name` of a WAN profile file (its stem when it cannot be read: the run reports that).
std::string profile_name(const fs::path& file) {
  try {
    return netsim::load_profile(file).name;
  } catch (const InputError&) {
    return file.stem().string();
  }
}

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '=' &&
        c != '.' && c != ',' && c != '+')
      c = '_';
  return s;
}

}  // namespace

namespace {
using RawPoints =
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, YAML::Node>>>>;

// The sweep's points as (label, [(key, value node)]): the grid's combinations (counted against
// kMaxSweepPoints before they are built), then the listed points, in that order.
RawPoints read_points(const YAML::Node& root, const YamlReader& in, const std::string& source) {
  RawPoints raw;
  if (auto grid = root["grid"]) {
    GT_REQUIRE(grid.IsMap() && grid.size() > 0,
               "{}: grid must map dotted config keys to lists of values", source);
    std::vector<std::vector<std::pair<std::string, YAML::Node>>> combos{{}};
    size_t grid_points = 1;
    for (const auto& kv : grid) {
      const auto key = kv.first.as<std::string>();
      GT_REQUIRE(kv.second.IsSequence() && kv.second.size() > 0,
                 "{}: grid.{} must be a non-empty list of values", source, key);
      // Counted before anything is built: a grid's points multiply (found by fuzz_sweep_config,
      // whose grid of a few lists took a minute to plan).
      grid_points *= kv.second.size();
      GT_REQUIRE(grid_points <= kMaxSweepPoints,
                 "{}: the grid has more than {} points (the product of its lists' lengths); split "
                 "the sweep",
                 source, kMaxSweepPoints);
      std::vector<std::vector<std::pair<std::string, YAML::Node>>> next;
      for (const auto& c : combos)
        for (const auto& v : kv.second) {
          auto n = c;
          n.emplace_back(key, YAML::Node(v));
          next.push_back(std::move(n));
        }
      combos = std::move(next);
    }
    for (auto& c : combos) raw.emplace_back("", std::move(c));
  }
  if (auto points = root["points"]) {
    GT_REQUIRE(points.IsSequence(), "{}: points must be a list of {{label, set}}", source);
    for (const auto& p : points) {
      in.check_keys(p, "points[]", {"label", "set"});
      std::vector<std::pair<std::string, YAML::Node>> values;
      if (p["set"]) {
        GT_REQUIRE(p["set"].IsMap(), "{}: points[].set must map dotted config keys to values",
                   source);
        for (const auto& kv : p["set"])
          values.emplace_back(kv.first.as<std::string>(), YAML::Node(kv.second));
      }
      raw.emplace_back(p["label"] ? in.string(p["label"], "points[].label") : "",
                       std::move(values));
    }
  }
  return raw;
}

// No point sets both wan and run.wan_profile, and no --set overrides a key the sweep varies.
void check_point_keys(const RawPoints& raw, const std::vector<ConfigOverride>& overrides,
                      const std::string& source) {
  for (const auto& [label, values] : raw) {
    bool wan = false, wan_profile = false;
    for (const auto& [key, value] : values) {
      wan |= key == "wan";
      wan_profile |= key == "run.wan_profile";
      for (const auto& o : overrides)
        GT_REQUIRE(o.key != key && !(key == "wan" && o.key == "run.wan_profile"),
                   "{}: {}: the sweep sets '{}' itself, so it cannot be overridden; change the "
                   "sweep file instead",
                   source, o.origin, key);
    }
    GT_REQUIRE(!(wan && wan_profile),
               "{}: a point sets both wan and run.wan_profile; allowed: one of them", source);
  }
}

// Each point's values as text, the sweep's keys in order of first use, and its label: the one
// given, else key=value pairs (the keys' last parts), sanitised; two points may not share one.
void label_points(const RawPoints& raw, SweepPlan& plan, const std::string& source) {
  std::set<std::string> labels;
  for (const auto& [label, values] : raw) {
    SweepPoint point;
    for (const auto& [key, value] : values) {
      point.values.emplace_back(key, flow(value));
      if (std::find(plan.keys.begin(), plan.keys.end(), key) == plan.keys.end())
        plan.keys.push_back(key);
    }
    std::string name = label;
    if (name.empty()) {
      for (const auto& [key, value] : point.values) {
        if (!name.empty()) name += ',';
        name.append(key, key.rfind('.') + 1).append("=").append(value);
      }
      if (name.empty()) name = "base";
    }
    point.label = sanitize(name);
    GT_REQUIRE(point.label != "." && point.label != "..",
               "{}: a point's label is '{}', which cannot name its folder", source, point.label);
    GT_REQUIRE(labels.insert(point.label).second, "{}: two points have the label '{}'", source,
               point.label.substr(0, 200));
    plan.points.push_back(std::move(point));
  }
}

// The index of the point labelled `baseline`, or an InputError naming a few labels.
std::size_t find_baseline(const std::string& baseline, const SweepPlan& plan,
                          const std::string& source) {
  const auto want = sanitize(baseline);
  const auto at = std::find_if(plan.points.begin(), plan.points.end(),
                               [&](const SweepPoint& p) { return p.label == want; });
  if (at == plan.points.end()) {
    std::string some;  // the first few labels: a large grid's full list would be megabytes
    for (std::size_t i = 0; i < std::min<std::size_t>(plan.points.size(), 8); ++i)
      some += (some.empty() ? "" : ", ") + plan.points[i].label.substr(0, 80);
    if (plan.points.size() > 8) some += fmt::format(", and {} more", plan.points.size() - 8);
    GT_REQUIRE(false, "{}: baseline is '{}', allowed: one of the points' labels ({})", source,
               want.substr(0, 200), some);
  }
  return static_cast<std::size_t>(at - plan.points.begin());
}

// One key of a point (or of the sweep's `set`) into `config`: `wan` and a run.wan_profile name or
// path as the profile file `wan_file` finds, any other dotted key as it is.
template <typename WanFile>
void set_point_key(YAML::Node& config, const std::string& key, const YAML::Node& value,
                   const WanFile& wan_file, const std::string& source) {
  if (key == "wan" || (key == "run.wan_profile" && value.IsScalar()))
    set_path(config, "run.wan_profile", YAML::Node(wan_file(value, key).string()), source);
  else
    set_path(config, key, value, source);
}

// A point's config as the run reads it (config_yaml), and its setup (the config without run.name
// and run.wan_profile, which the seeds table groups by); refused when YAML cannot write it or
// what it wrote does not read back.
void write_point_config(const YAML::Node& config, SweepPoint& point, const std::string& sweep,
                        const std::string& source) {
  {
    YAML::Node setup = YAML::Clone(config);
    if (setup["run"] && setup["run"].IsMap()) {
      setup["run"].remove("name");
      setup["run"].remove("wan_profile");
    }
    YAML::Emitter e;
    e << setup;
    point.setup = e.c_str();
  }
  YAML::Emitter e;
  e << config;
  // yaml-cpp's emitter refuses some scalars it parsed (control characters, bytes that are not
  // UTF-8) and stops there: its partial text would be an invalid config for the point.
  GT_REQUIRE(e.good(),
             "{}: point '{}': its config cannot be written as YAML ({}); a key or value "
             "holds characters YAML cannot write (control characters, bytes that are not UTF-8)",
             source, point.label.substr(0, 64), e.GetLastError());
  point.config_yaml =
      fmt::format("# geotrain sweep {}: point '{}'\n{}\n", sweep, point.label, e.c_str());
  // And what it wrote must read back: yaml-cpp writes a key of more than 1024 characters as a
  // plain key, which YAML (and its own parser) refuses (found by fuzz_sweep_config).
  try {
    (void)YAML::Load(point.config_yaml);
  } catch (const YAML::Exception& x) {
    throw InputError(fmt::format(
        "{}: point '{}': its config does not read back as YAML ({}); a key is too long (YAML "
        "allows 1024 characters) or holds characters YAML cannot write",
        source, point.label.substr(0, 64), x.what()));
  }
}

}  // namespace

SweepPlan parse_sweep(const std::string& text, const std::string& source, const fs::path& sweep_dir,
                      const std::string& default_name, const std::vector<ConfigOverride>& overrides,
                      const fs::path& project_configs) try {
  const YamlReader in{source};
  const YAML::Node root = parse_yaml(text, source);  // a key written twice is an error
  GT_REQUIRE(root.IsMap(), "{}: a sweep must be a mapping", source);
  in.check_keys(root, "", {"name", "base", "out_dir", "set", "grid", "points", "baseline"});
  SweepPlan plan;
  plan.name = root["name"] ? in.string(root["name"], "name") : default_name;
  // The name is the sweep's folder under out_dir: one folder, never a path out of it.
  GT_REQUIRE(!plan.name.empty() && plan.name.find('/') == std::string::npos && plan.name != "." &&
                 plan.name != "..",
             "{}: name is '{}', allowed: a folder name (no '/', not empty, '.' or '..')", source,
             plan.name.substr(0, 200));
  if (root["out_dir"]) plan.out_dir = in.string(root["out_dir"], "out_dir");
  GT_REQUIRE(root["base"], "{}: key 'base' is missing (the config every point starts from)",
             source);
  fs::path base = in.string(root["base"], "base");
  if (base.is_relative()) base = sweep_dir / base;
  const std::string base_text = read_text_file(base);
  // `wan` and a point's run.wan_profile: a path relative to the sweep file (then to the project's
  // configs/), or a name: NAME.yaml in the base's wan/ folder, the sweep's ../wan/, the project's
  // configs/wan/. The base's own run.wan_profile is relative to the base.
  const auto search = sweep_search(sweep_dir, base.parent_path(), project_configs);
  const auto wan_file = [&](const YAML::Node& v, const std::string& key) {
    GT_REQUIRE(v.IsScalar(), "{}: {} is '{}', allowed: a WAN profile name (e.g. lan) or file",
               source, key, flow(v));
    return find_wan_profile(v.Scalar(), search, source + ": " + key);
  };

  const RawPoints raw = read_points(root, in, source);
  GT_REQUIRE(!raw.empty(), "{}: the sweep has no points (give grid, points, or both)", source);
  GT_REQUIRE(raw.size() <= kMaxSweepPoints, "{}: the sweep has {} points, at most {} allowed",
             source, raw.size(), kMaxSweepPoints);

  check_point_keys(raw, overrides, source);

  // Labels, and the baseline, before any config is built: a sweep that names no point as its
  // baseline is refused at once, not after planning thousands of points.
  label_points(raw, plan, source);
  if (auto b = root["baseline"])
    plan.baseline = find_baseline(in.string(b, "baseline"), plan, source);

  // The base, then the sweep's own `set` (every point's), then --set, then each point's keys.
  YAML::Node base_config = parse_yaml(base_text, base.string());
  if (auto shared = root["set"]) {
    GT_REQUIRE(shared.IsMap() && shared.size() > 0,
               "{}: set must map dotted config keys to values (set for every point)", source);
    for (const auto& kv : shared)
      set_point_key(base_config, kv.first.as<std::string>(), YAML::Clone(kv.second), wan_file,
                    source);
  }
  base_config = apply_overrides(base_config, overrides, source);
  std::map<std::string, std::string> profile_names;  // a WAN profile file -> its name
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto& values = raw[i].second;
    SweepPoint& point = plan.points[i];
    YAML::Node config = YAML::Clone(base_config);
    for (const auto& [key, value] : values) {
      // A clone: yaml-cpp nodes are handles, so setting the sweep's own node shared it, and a
      // later key of this point (worker.x after worker: {...}) wrote into the sweep's value, seen
      // by the next point. Sharing also merged the document's node memory into the config, and
      // each later config every earlier one's, which made planning quadratic (found by
      // fuzz_sweep_config: 4,096 points took 4 minutes, 5 s with the clone, ASan build).
      set_point_key(config, key, YAML::Clone(value), wan_file, source);
    }
    set_path(config, "run.name", YAML::Node(point.label), source);
    // The base's own profile (the points' are absolute by now): a name or a path, found as
    // `geotrain run` finds it.
    if (const auto w = config["run"]["wan_profile"];
        w && w.IsScalar() && fs::path(w.Scalar()).is_relative())
      resolve_wan_profile(config, base.parent_path(), project_configs, base.string());
    const auto regions = config["regions"];
    if (config["run"]["wan_profile"] && regions && regions.IsSequence() && regions.size() > 1) {
      const auto file = config["run"]["wan_profile"].Scalar();
      auto known = profile_names.find(file);  // a grid names a few profiles over many points
      if (known == profile_names.end())
        known = profile_names.emplace(file, profile_name(file)).first;
      point.wan_profile = known->second;
    }
    write_point_config(config, point, plan.name, source);
  }
  return plan;
} catch (const YAML::Exception& e) {
  throw yaml_input_error(source, e);  // a check is missing: still an InputError
}

SweepPlan load_sweep(const fs::path& file, const std::vector<ConfigOverride>& overrides,
                     const fs::path& project_configs) {
  return parse_sweep(read_text_file(file), describe_source(file.string(), overrides),
                     file.parent_path(), file.stem().string(), overrides, project_configs);
}

namespace {
// this / reference: on time to target when both reached it, else on wall time.
std::optional<double> time_ratio(const json& s, const json& ref) {
  const auto ttt = summary_number(s, k::time_to_target_seconds);
  const auto rttt = summary_number(ref, k::time_to_target_seconds);
  if (ttt && rttt && *rttt > 0) return *ttt / *rttt;
  const auto wall = summary_number(s, k::wall_seconds),
             rwall = summary_number(ref, k::wall_seconds);
  if (wall && rwall && *rwall > 0) return *wall / *rwall;
  return std::nullopt;
}

std::string value_of(const SweepPoint& p, const std::string& key) {
  for (const auto& [k, v] : p.values)
    if (k == key) return v;
  return "";
}
}  // namespace

std::vector<std::optional<double>> wan_over_lan(const std::vector<SweepRow>& rows) {
  std::vector<std::optional<double>> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& p = *rows[i].point;
    if (p.wan_profile.empty() || !completed(rows[i].summary)) continue;
    for (const auto& lan : rows) {
      if (lan.point->wan_profile != "lan" || lan.point->setup != p.setup) continue;
      if (completed(lan.summary)) out[i] = time_ratio(rows[i].summary, lan.summary);
      break;  // the first LAN point of the same setup is the control
    }
  }
  return out;
}

std::string results_csv(const SweepPlan& plan, const std::vector<SweepRow>& rows) {
  std::string out = "label";
  for (const auto& k : plan.keys) {
    out += ',';
    out += k;
  }
  out +=
      ",status,final_test_accuracy,accuracy_delta_pp,time_to_target_seconds,wall_seconds,wan_bytes_"
      "total,"
      "wan_reduction,speedup,baseline,run_dir,final_val_bpb,val_bpb_delta,wan_profile,wan_over_"
      "lan\n";
  const auto over_lan = wan_over_lan(rows);
  for (const auto& r : rows) {
    const auto d = derive_deltas(r.summary, rows[plan.baseline].summary);
    const auto& ratio = over_lan[static_cast<std::size_t>(&r - rows.data())];
    out += csv_text(r.point->label);
    for (const auto& k : plan.keys) {
      out += ',';
      out += csv_text(value_of(*r.point, k));
    }
    out += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                       r.summary.is_object() ? r.summary.value(k::status, "") : "not run",
                       csv_cell(d.accuracy), csv_cell(d.delta), csv_cell(d.ttt), csv_cell(d.wall),
                       csv_cell(d.wan), csv_cell(d.reduction), csv_cell(d.speedup),
                       &r == &rows[plan.baseline] ? "yes" : "", csv_text(r.run_dir.string()),
                       csv_cell(d.bpb), csv_cell(d.bpb_delta), csv_text(r.point->wan_profile),
                       csv_cell(ratio ? json(*ratio) : json(nullptr)));
  }
  return out;
}

std::string results_markdown(const SweepPlan& plan, const std::vector<SweepRow>& rows) {
  std::string md = fmt::format(
      "# Sweep {}\n\nBaseline: `{}`. Deltas are against the baseline row; a run that did "
      "not complete is listed, not ranked.\n\n| run |",
      plan.name, plan.points[plan.baseline].label);
  for (const auto& k : plan.keys) md += fmt::format(" `{}` |", k);
  // Language models are compared on validation bits per byte (lower is better), not accuracy.
  const bool lm = std::any_of(rows.begin(), rows.end(),
                              [](const SweepRow& r) { return is_language_model(r.summary); });
  md += lm ? " status | val bpb | delta (bpb) |" : " status | accuracy | delta (pp) |";
  md += " time to target (s) | wall (s) | WAN bytes | WAN reduction | speedup |";
  // A sweep with a LAN control (a point on the `lan` profile and the same setup on another)
  // gets the WAN's cost in time.
  const auto over_lan = wan_over_lan(rows);
  const bool has_lan_pair = std::any_of(rows.begin(), rows.end(), [&](const SweepRow& r) {
    const auto& v = over_lan[static_cast<std::size_t>(&r - rows.data())];
    return v && r.point->wan_profile != "lan";
  });
  if (has_lan_pair) md += " WAN profile | WAN / LAN time |";
  md += "\n|";
  for (std::size_t i = 0; i < plan.keys.size() + (has_lan_pair ? 11 : 9); ++i) md += "---|";
  md += "\n";
  const auto pct = [](const json& v) {
    return v.is_number() ? fmt::format("{:.2f}%", 100 * v.get<double>()) : "-";
  };
  const auto num = [](const json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : "-";
  };
  for (const auto& r : rows) {
    const auto d = derive_deltas(r.summary, rows[plan.baseline].summary);
    md += fmt::format("| {}{} |", r.point->label, &r == &rows[plan.baseline] ? " (baseline)" : "");
    for (const auto& k : plan.keys) md += fmt::format(" {} |", value_of(*r.point, k));
    md += fmt::format(" {} | {} | {} | {} | {} | {} | {} | {} |", status_cell(r.summary),
                      lm ? num(d.bpb, "{:.3f}") : pct(d.accuracy),
                      lm ? num(d.bpb_delta, "{:+.3f}") : num(d.delta, "{:+.2f}"),
                      num(d.ttt, "{:.1f}"), num(d.wall, "{:.1f}"),
                      d.wan.is_number() ? fmt::format("{:.3g}", d.wan.get<double>()) : "-",
                      pct(d.reduction), num(d.speedup, "{:.2f}x"));
    if (has_lan_pair) {
      const auto& ratio = over_lan[static_cast<std::size_t>(&r - rows.data())];
      md += fmt::format(" {} | {} |", r.point->wan_profile.empty() ? "-" : r.point->wan_profile,
                        ratio ? fmt::format("{:.2f}x", *ratio) : "-");
    }
    md += "\n";
  }
  if (has_lan_pair)
    md +=
        "\nWAN / LAN time (`wan_over_lan` in results.csv): the run's time to target (wall time "
        "when "
        "either run missed the target) over the same setup's on the `lan` profile.\n";
  md +=
      "\nPlots: `sweep_accuracy_vs_time.png`, `sweep_accuracy_vs_wan_bytes.png`, `sweep_bars.png`. "
      "Each run's own report is in its run folder (`run_dir` in results.csv).\n";
  return md;
}

}  // namespace geotrain::launcher
