#include "launcher/sweep/compare.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/run_summary_keys.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/results_table.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/run_settings.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr std::size_t kMarkdownKeys = 8;

// What the launcher sets for every run (ports, folders, the expanded parameter table): never a
// setting the user compares on.
// The folder as an absolute path without a trailing '/'.
fs::path folder(const fs::path& dir) {
  const auto abs = fs::absolute(dir).lexically_normal();
  return abs.has_filename() ? abs : abs.parent_path();
}

bool launcher_owned(const std::string& key) {
  for (const char* prefix : {"server.endpoints", "server.run_dir", "worker.run_dir",
                             "worker.routes", "model.tensors", "run.name", "run.out_dir"})
    if (key == prefix || key.starts_with(std::string(prefix) + ".")) return true;
  return false;
}

// `run_dir`: values inside the run's own folder (keys, checkpoints) are the launcher's too.
void flatten(const YAML::Node& node, const std::string& prefix, const std::string& run_dir,
             std::map<std::string, std::string>& out) {
  if (node.IsMap() && node.size() > 0) {
    for (const auto& kv : node) {
      const auto key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, run_dir, out);
    }
    return;
  }
  if (launcher_owned(prefix)) return;
  if (node.IsScalar() && node.Scalar().starts_with(run_dir)) return;
  if (node.IsScalar()) {
    // A WAN profile is an absolute path in config.yaml: its file name says which one.
    out[prefix] =
        prefix == "run.wan_profile" ? fs::path(node.Scalar()).stem().string() : node.Scalar();
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

// The run's config.yaml; null when the folder has none.
YAML::Node read_config(const fs::path& dir) {
  const auto file = dir / "config.yaml";
  if (!fs::exists(file)) return YAML::Node();
  try {
    return YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    GT_REQUIRE(false, "{}: config.yaml is not valid YAML: {}", dir.string(), e.what());
  }
  return YAML::Node();
}

std::map<std::string, std::string> read_settings(const YAML::Node& config, const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (config) flatten(config, "", folder(dir).string(), out);
  return out;
}

// What a run is called in the tables and the plot's legend: its run.name (a sweep point's
// label), else its folder's name.
std::string run_name(const YAML::Node& config, const fs::path& dir) {
  if (config && config.IsMap() && config["run"] && config["run"].IsMap() && config["run"]["name"] &&
      config["run"]["name"].IsScalar() && !config["run"]["name"].Scalar().empty())
    return config["run"]["name"].Scalar();
  return folder(dir).filename().string();
}

// Labels that tell the runs apart: the run's name; where names repeat, the folder's name (which
// starts with the run's start time); where those repeat too (the same folder name in two sweeps),
// the parent folder's name before it.
void label_runs(std::vector<ComparedRun>& runs) {
  const auto count = [&](auto label_of) {
    std::map<std::string, int> uses;
    for (const auto& r : runs) ++uses[label_of(r)];
    return uses;
  };
  const auto name_uses = count([](const ComparedRun& r) { return r.label; });
  for (auto& r : runs)
    if (name_uses.at(r.label) > 1) r.label = folder(r.dir).filename().string();
  const auto folder_uses = count([](const ComparedRun& r) { return r.label; });
  for (auto& r : runs)
    if (folder_uses.at(r.label) > 1)
      r.label = fmt::format("{}/{}", folder(r.dir).parent_path().filename().string(),
                            folder(r.dir).filename().string());
}

bool looks_like_run_folder(const fs::path& dir) {
  if (fs::exists(dir / "summary.json") || fs::exists(dir / "config.yaml")) return true;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("worker-") && name.ends_with(".metrics.jsonl")) return true;
  }
  return false;
}

std::string setting(const ComparedRun& r, const std::string& key) {
  auto it = r.settings.find(key);
  return it == r.settings.end() ? "(default)" : it->second;
}
}  // namespace

Comparison load_comparison(const std::vector<fs::path>& run_dirs) {
  GT_REQUIRE(!run_dirs.empty(), "compare: give at least one run folder");
  Comparison c;
  for (const auto& dir : run_dirs) {
    GT_REQUIRE(fs::is_directory(dir), "compare: '{}' is not a run folder: no such directory",
               dir.string());
    GT_REQUIRE(looks_like_run_folder(dir),
               "compare: '{}' is not a run folder: it has no summary.json, config.yaml or "
               "worker-*.metrics.jsonl (geotrain run writes them; see docs/run-folder.md)",
               dir.string());
    GT_REQUIRE(fs::exists(dir / "summary.json"),
               "compare: '{}' has no summary.json: the run has not finished (geotrain run writes "
               "it at the end, also for failed and interrupted runs)",
               dir.string());
    ComparedRun r;
    r.dir = dir;
    auto summary = read_summary(dir);
    GT_REQUIRE(summary.has_value(), "compare: '{}': summary.json is not a JSON object",
               dir.string());
    r.summary = std::move(*summary);
    const auto config = read_config(dir);
    r.settings = read_settings(config, dir);
    r.label = run_name(config, dir);
    c.runs.push_back(std::move(r));
  }
  label_runs(c.runs);
  c.language_model = is_language_model(c.runs[0].summary);
  for (const auto& r : c.runs)
    GT_REQUIRE(is_language_model(r.summary) == c.language_model,
               "compare: '{}' is a {} run and '{}' a {} run: compare runs of one kind",
               r.dir.string(), is_language_model(r.summary) ? "language-model" : "classifier",
               c.runs[0].dir.string(), c.language_model ? "language-model" : "classifier");
  std::set<std::string> seen;
  for (const auto& r : c.runs)
    for (const auto& entry : r.settings) {
      const auto& key = entry.first;  // not a structured binding: clang < 16 cannot capture one
      if (!seen.insert(key).second) continue;
      const auto first = setting(c.runs[0], key);
      if (std::any_of(c.runs.begin(), c.runs.end(),
                      [&](const ComparedRun& o) { return setting(o, key) != first; }))
        c.differing_keys.push_back(key);
    }
  return c;
}

std::string comparison_csv(const Comparison& c) {
  std::string out = "label";
  for (const auto& k : c.differing_keys) {
    out += ',';
    out += csv_text(k);
  }
  out +=
      ",status,model,final_test_accuracy,accuracy_delta_pp,final_val_bpb,final_val_loss,val_bpb_"
      "delta,time_to_target_seconds,wall_seconds,wan_bytes_total,wan_wire_bytes_total,wan_"
      "reduction,speedup,baseline,run_dir\n";
  for (const auto& r : c.runs) {
    const auto d = derive_deltas(r.summary, c.runs[0].summary);
    out += csv_text(r.label);
    for (const auto& k : c.differing_keys) {
      out += ',';
      out += csv_text(setting(r, k));
    }
    out += fmt::format(
        ",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_text(r.summary.value(k::status, "")),
        csv_text(r.summary.value(k::model, "")), csv_cell(d.accuracy), csv_cell(d.delta),
        csv_cell(d.bpb), csv_cell(d.loss), csv_cell(d.bpb_delta), csv_cell(d.ttt), csv_cell(d.wall),
        csv_cell(d.wan), csv_cell(d.wire), csv_cell(d.reduction), csv_cell(d.speedup),
        &r == &c.runs[0] ? "yes" : "", csv_text(folder(r.dir).string()));
  }
  return out;
}

std::string comparison_markdown(const Comparison& c) {
  const bool lm = c.language_model;
  std::string md = fmt::format(
      "# Comparison of {} run(s)\n\nBaseline: `{}` (the first). Deltas, WAN reduction and speedup "
      "are against it; speedup is on time to target when both reached it, else on wall time. A "
      "run that did not complete (or a baseline that did not) is listed but not ranked.\n\n",
      c.runs.size(), c.runs[0].label);
  const std::size_t shown = std::min(c.differing_keys.size(), kMarkdownKeys);
  md += "| run |";
  for (std::size_t i = 0; i < shown; ++i) md += fmt::format(" `{}` |", c.differing_keys[i]);
  md += lm ? " status | val bpb | val loss | delta (bpb) |" : " status | accuracy | delta (pp) |";
  md += " time to target (s) | wall (s) | WAN bytes | WAN reduction | speedup |\n|";
  for (std::size_t i = 0; i < shown + (lm ? 10 : 9); ++i) md += "---|";
  md += "\n";
  const auto pct = [](const json& v) {
    return v.is_number() ? fmt::format("{:.2f}%", 100 * v.get<double>()) : "-";
  };
  const auto number = [](const json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : "-";
  };
  for (const auto& r : c.runs) {
    const auto d = derive_deltas(r.summary, c.runs[0].summary);
    md += fmt::format("| {}{} |", r.label, &r == &c.runs[0] ? " (baseline)" : "");
    for (std::size_t i = 0; i < shown; ++i)
      md += fmt::format(" {} |", setting(r, c.differing_keys[i]));
    md += fmt::format(" {} |", status_cell(r.summary));
    if (lm)
      md += fmt::format(" {} | {} | {} |", number(d.bpb, "{:.3f}"), number(d.loss, "{:.4f}"),
                        number(d.bpb_delta, "{:+.3f}"));
    else
      md += fmt::format(" {} | {} |", pct(d.accuracy), number(d.delta, "{:+.2f}"));
    md += fmt::format(" {} | {} | {} | {} | {} |\n", number(d.ttt, "{:.1f}"),
                      number(d.wall, "{:.1f}"),
                      d.wan.is_number() ? human_bytes(d.wan.get<double>()) : "-", pct(d.reduction),
                      number(d.speedup, "{:.2f}x"));
  }
  if (c.differing_keys.empty())
    md += "\nThe runs' configs do not differ (apart from names, ports and folders).\n";
  else if (shown < c.differing_keys.size())
    md += fmt::format("\n{} more config keys differ; compare.csv has them all.\n",
                      c.differing_keys.size() - shown);
  md += fmt::format(
      "\nPlot: `compare.png` ({} against time and against WAN payload bytes). Each run's own "
      "report is in its folder (`run_dir` in compare.csv).\n",
      lm ? "validation bits per byte" : "test accuracy");
  return md;
}

int run_compare(const CompareOptions& o) {
  const auto c = load_comparison(o.runs);
  create_output_folder(o.out_dir, "the comparison's folder");
  const auto md = comparison_markdown(c);
  write_text_file(o.out_dir / "compare.md", md);
  write_text_file(o.out_dir / "compare.csv", comparison_csv(c));
  std::fputs(md.c_str(), o.table);
  if (!o.plot_script.empty()) {
    if (!fs::exists(o.python) || !fs::exists(o.plot_script)) {
      spdlog::warn(
          "compare: plot skipped: {} or {} is missing (scripts/bootstrap.sh installs "
          "python3-matplotlib)",
          o.python, o.plot_script.string());
    } else {
      ChildProcess plot(o.python, {o.plot_script.string(), o.out_dir.string()},
                        o.out_dir / "plots.log");
      const auto st = plot.wait_for(std::chrono::seconds(120));
      if (!st || *st != 0)
        spdlog::warn("compare: the plot script failed; see {}:\n{}",
                     (o.out_dir / "plots.log").string(), tail_lines(o.out_dir / "plots.log", 10));
    }
  }
  std::fprintf(o.log, "compare: %zu run(s); files in %s (compare.md, compare.csv%s)\n",
               c.runs.size(), o.out_dir.string().c_str(),
               fs::exists(o.out_dir / "compare.png") ? ", compare.png" : "");
  return 0;
}

}  // namespace geotrain::launcher
