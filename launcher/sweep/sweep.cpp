#include "launcher/sweep/sweep.hpp"

#include <chrono>

#include "core/log.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/run_settings.hpp"
#include "launcher/sweep/sweep_plan.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// The newest run folder of a point with a summary, preferring completed ones.
std::optional<std::pair<fs::path, json>> find_run(const fs::path& point_runs) {
  if (!fs::is_directory(point_runs)) return std::nullopt;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(point_runs))
    if (e.is_directory() && fs::exists(e.path() / "summary.json")) dirs.push_back(e.path());
  std::sort(dirs.rbegin(), dirs.rend());
  std::optional<std::pair<fs::path, json>> newest;
  for (const auto& d : dirs) {
    auto s = json::parse(read_text_file(d / "summary.json"), nullptr, false);
    if (s.is_discarded()) continue;
    if (s.value("status", "") == "completed") return std::pair{d, s};
    if (!newest) newest = std::pair{d, s};
  }
  return newest;
}

void write_results(const fs::path& dir, const SweepPlan& plan, const std::vector<SweepRow>& rows) {
  write_text_file(dir / "results.csv", results_csv(plan, rows));
  write_text_file(dir / "results.md", results_markdown(plan, rows));
}

// --dry-run: every point's config checked as its run would check it (the run section, then the
// caller's validation of the whole config), then one line per point.
int check_points(const SweepPlan& plan, const fs::path& dir, const SweepOptions& o) {
  for (const auto& p : plan.points) {
    const auto file = dir / "configs" / (p.label + ".yaml");
    (void)parse_run_settings(p.config_yaml, file.string(), file.parent_path(), p.label,
                             o.run.project_configs);
    if (o.run.validate) o.run.validate(p.config_yaml, file.string());
  }
  size_t completed = 0;
  for (const auto& p : plan.points) {
    const auto found = find_run(dir / "runs" / p.label);
    const bool done = found && found->second.value("status", "") == "completed";
    completed += done ? 1 : 0;
    std::fprintf(o.run.progress, "  %s: %s\n", p.label.c_str(),
                 done ? ("completed, " + found->first.filename().string()).c_str() : "to run");
  }
  std::fprintf(o.run.progress,
               "sweep %s (dry run): %zu point(s), %zu completed, %zu to run; every config "
               "checked; configs in %s\n",
               plan.name.c_str(), plan.points.size(), completed, plan.points.size() - completed,
               (dir / "configs").string().c_str());
  return 0;
}
}  // namespace

int run_sweep(const SweepOptions& o, std::stop_token stop) {
  const auto plan = load_sweep(o.sweep_file, o.overrides, o.run.project_configs);
  const auto dir = (o.out_dir ? *o.out_dir : plan.out_dir) / plan.name;
  fs::create_directories(dir / "configs");
  std::string note;
  for (const auto& ov : o.overrides) note += "# run with " + ov.origin + "\n";
  write_text_file(dir / "sweep.yaml", note + read_text_file(o.sweep_file));
  std::vector<SweepRow> rows;
  for (const auto& p : plan.points) {
    rows.push_back({&p, json(nullptr), {}});
    write_text_file(dir / "configs" / (p.label + ".yaml"), p.config_yaml);
  }
  if (o.dry_run) return check_points(plan, dir, o);
  spdlog::info("sweep {}: {} point(s), folder {}", plan.name, plan.points.size(), dir.string());

  const auto t0 = std::chrono::steady_clock::now();
  int ran = 0, exit_code = 0;
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const auto& p = plan.points[i];
    const auto point_runs = dir / "runs" / p.label;
    if (auto done = find_run(point_runs); done && done->second.value("status", "") == "completed") {
      rows[i].summary = done->second;
      rows[i].run_dir = done->first;
      spdlog::info("sweep {}: point {}/{} '{}' already complete ({}), skipped", plan.name, i + 1,
                   plan.points.size(), p.label, done->first.filename().string());
      continue;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string eta;
    if (ran > 0) {
      std::size_t left = 0;
      for (std::size_t j = i; j < plan.points.size(); ++j)
        left += rows[j].summary.is_null() ? 1 : 0;
      eta = fmt::format(", about {:.0f} s left", elapsed / ran * static_cast<double>(left));
    }
    spdlog::info("sweep {}: point {}/{} '{}' ({:.0f} s so far{})", plan.name, i + 1,
                 plan.points.size(), p.label, elapsed, eta);
    LaunchOptions run = o.run;
    run.overrides.clear();  // already in the point's config
    run.config = dir / "configs" / (p.label + ".yaml");
    run.out_dir = point_runs;
    const auto result = run_deployment(run, stop);
    ++ran;
    rows[i].run_dir = result.run_dir;
    if (auto s = find_run(point_runs)) rows[i].summary = s->second;
    write_results(dir, plan, rows);
    if (result.exit_code == 130 || stop.stop_requested()) {
      spdlog::warn("sweep {}: interrupted; rerun the same command to resume", plan.name);
      return 130;
    }
    if (result.exit_code != 0) exit_code = 1;
  }
  write_results(dir, plan, rows);
  if (!o.plot_script.empty() && fs::exists(o.run.python) && fs::exists(o.plot_script)) {
    ChildProcess plot(o.run.python, {o.plot_script.string(), dir.string()}, dir / "plots.log");
    const auto st = plot.wait_for(std::chrono::seconds(120));
    if (!st || *st != 0)
      spdlog::warn("sweep: plot script failed; see {}", (dir / "plots.log").string());
  }
  std::fprintf(o.run.progress, "sweep %s: %zu point(s) done; results: %s\n", plan.name.c_str(),
               plan.points.size(), (dir / "results.md").string().c_str());
  return exit_code;
}

}  // namespace geotrain::launcher
