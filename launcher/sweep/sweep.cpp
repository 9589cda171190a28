#include "launcher/sweep/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/run_summary_keys.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/run_settings.hpp"
#include "launcher/sweep/sweep_plan.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

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
    auto s = read_summary(d);
    if (!s) continue;
    if (s->value(k::status, "") == "completed") return std::pair{d, *s};
    if (!newest) newest = std::pair{d, *s};
  }
  return newest;
}

void write_results(const fs::path& dir, const SweepPlan& plan, const std::vector<SweepRow>& rows) {
  write_text_file(dir / "results.csv", results_csv(plan, rows));
  write_text_file(dir / "results.md", results_markdown(plan, rows));
}

// Every point's config checked as its run would check it (the run section, then the caller's
// validation of the whole config), before anything is written or run: a typo in the last point
// stops the sweep before the first one trains. Throws InputError naming the point's config.
void check_points(const SweepPlan& plan, const fs::path& dir, const SweepOptions& o) {
  for (const auto& p : plan.points) {
    const auto file = dir / "configs" / (p.label + ".yaml");
    (void)parse_run_settings(p.config_yaml, file.string(), file.parent_path(), p.label,
                             o.run.project_configs);
    if (o.run.validate) o.run.validate(p.config_yaml, file.string());
  }
}

// --dry-run: one line per point, after check_points.
int list_points(const SweepPlan& plan, const fs::path& dir, const SweepOptions& o) {
  size_t completed = 0;
  for (const auto& p : plan.points) {
    const auto found = find_run(dir / "runs" / p.label);
    const bool done = found && found->second.value(k::status, "") == "completed";
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

// What the points still to run share: the plan, its folder, the options, the rows of the results
// and the clock the estimates start from. `mutex` guards rows and the results files.
struct SweepRun {
  const SweepPlan& plan;
  const fs::path& dir;
  const SweepOptions& o;
  std::vector<SweepRow>& rows;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::mutex mutex;
  int finished = 0;  // points run so far

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // ", about N s left" once a point has finished: the wall time per finished point so far, times
  // the points without a summary (with several at a time, that time is already divided).
  std::string estimate() const {
    if (finished == 0) return "";
    std::size_t left = 0;
    for (const auto& r : rows) left += r.summary.is_null() ? 1 : 0;
    return fmt::format(", about {:.0f} s left", elapsed() / finished * static_cast<double>(left));
  }
  // Point i's deployment, its progress to `progress`; its row and the results files updated.
  // Returns run_deployment's exit code.
  int run_point(std::size_t i, std::FILE* progress, std::stop_token stop) {
    const auto& p = plan.points[i];
    const auto point_runs = dir / "runs" / p.label;
    LaunchOptions run = o.run;
    run.overrides.clear();  // already in the point's config
    run.config = dir / "configs" / (p.label + ".yaml");
    run.out_dir = point_runs;
    if (progress != o.run.progress) {
      run.progress = progress;
      run.redraw = false;
    }
    const auto result = run_deployment(run, stop);
    std::lock_guard lock(mutex);
    ++finished;
    rows[i].run_dir = result.run_dir;
    if (auto s = find_run(point_runs)) rows[i].summary = s->second;
    write_results(dir, plan, rows);
    return result.exit_code;
  }
};

// One point after another on this thread, each showing its progress as `geotrain run` does.
int run_one_at_a_time(SweepRun& s, const std::vector<std::size_t>& pending, std::stop_token stop) {
  int exit_code = 0;
  for (const std::size_t i : pending) {
    spdlog::info("sweep {}: point {}/{} '{}' ({:.0f} s so far{})", s.plan.name, i + 1,
                 s.plan.points.size(), s.plan.points[i].label, s.elapsed(), s.estimate());
    const int code = s.run_point(i, s.o.run.progress, stop);
    if (code == 130 || stop.stop_requested()) return 130;
    if (code != 0) exit_code = 1;
  }
  return exit_code;
}

struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// --jobs N: up to N points at once, each deployment on a thread of its own (its children's
// PR_SET_PDEATHSIG follows that thread, which lives until they are stopped) with its progress in
// runs/<label>/progress.log; a line here when each starts and ends.
int run_several_at_once(SweepRun& s, const std::vector<std::size_t>& pending,
                        std::stop_token stop) {
  std::size_t next = 0;
  int exit_code = 0;
  bool interrupted = false;
  std::exception_ptr failure;  // the first point that threw; the others finish, none start
  const auto run_logged = [&](std::size_t i) {
    const auto& p = s.plan.points[i];
    const auto log = s.dir / "runs" / p.label / "progress.log";
    create_output_folder(log.parent_path(), "the point's folder");
    const std::unique_ptr<std::FILE, CloseFile> progress(std::fopen(log.c_str(), "a"));
    spdlog::info("sweep {}: point {}/{} '{}' started ({:.0f} s so far); progress in {}",
                 s.plan.name, i + 1, s.plan.points.size(), p.label, s.elapsed(), log.string());
    const int code = s.run_point(i, progress ? progress.get() : s.o.run.progress, stop);
    std::lock_guard lock(s.mutex);
    spdlog::info("sweep {}: point {}/{} '{}' {} ({:.0f} s so far{})", s.plan.name, i + 1,
                 s.plan.points.size(), p.label,
                 code == 0 ? "completed" : fmt::format("failed (exit {})", code), s.elapsed(),
                 s.estimate());
    if (code == 130) interrupted = true;
    if (code != 0) exit_code = 1;
  };
  const auto work = [&] {
    for (;;) {
      std::size_t i = 0;
      {
        std::lock_guard lock(s.mutex);
        if (next == pending.size() || interrupted || stop.stop_requested()) return;
        i = pending[next++];
      }
      try {
        run_logged(i);
      } catch (...) {
        // An exception must not escape a std::thread (it would terminate the process): the
        // first is rethrown on the sweep's thread once the points under way have ended.
        std::lock_guard lock(s.mutex);
        if (!failure) failure = std::current_exception();
        interrupted = true;
        return;
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < std::min<std::size_t>(s.o.jobs, pending.size()); ++t)
      threads.emplace_back(work);
  }  // joined
  if (failure) std::rethrow_exception(failure);
  return interrupted || stop.stop_requested() ? 130 : exit_code;
}
}  // namespace

int run_sweep(const SweepOptions& o, std::stop_token stop) {
  GT_REQUIRE(o.jobs >= 1, "sweep: --jobs is {}, must be at least 1", o.jobs);
  const auto plan = load_sweep(o.sweep_file, o.overrides, o.run.project_configs);
  const auto dir = (o.out_dir ? *o.out_dir : plan.out_dir) / plan.name;
  check_points(plan, dir, o);
  create_output_folder(dir / "configs", "the sweep's folder");
  std::string note;
  for (const auto& ov : o.overrides) note += "# run with " + ov.origin + "\n";
  write_text_file(dir / "sweep.yaml", note + read_text_file(o.sweep_file));
  std::vector<SweepRow> rows;
  for (const auto& p : plan.points) {
    rows.push_back({&p, json(nullptr), {}});
    write_text_file(dir / "configs" / (p.label + ".yaml"), p.config_yaml);
  }
  if (o.dry_run) return list_points(plan, dir, o);
  spdlog::info("sweep {}: {} point(s), folder {}{}", plan.name, plan.points.size(), dir.string(),
               o.jobs > 1 ? fmt::format(", up to {} at a time", o.jobs) : "");

  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const auto& p = plan.points[i];
    if (auto done = find_run(dir / "runs" / p.label);
        done && done->second.value(k::status, "") == "completed") {
      rows[i].summary = done->second;
      rows[i].run_dir = done->first;
      spdlog::info("sweep {}: point {}/{} '{}' already complete ({}), skipped", plan.name, i + 1,
                   plan.points.size(), p.label, done->first.filename().string());
    } else {
      pending.push_back(i);
    }
  }
  SweepRun s{plan, dir, o, rows, std::chrono::steady_clock::now(), {}, 0};
  const int exit_code = o.jobs > 1 && pending.size() > 1 ? run_several_at_once(s, pending, stop)
                                                         : run_one_at_a_time(s, pending, stop);
  if (exit_code == 130) {
    spdlog::warn("sweep {}: interrupted; rerun the same command to resume", plan.name);
    return 130;
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
