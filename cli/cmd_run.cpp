// `geotrain run [CONFIG] [--out DIR] [--wan PROFILE] [--set KEY=VALUE]...`: launches a whole
// deployment on this machine (launcher/), with configs/demo.yaml when no CONFIG is given;
// `geotrain sweep SWEEP.yaml [--out DIR] [--set KEY=VALUE]... [--dry-run]`: a grid of such runs,
// one after another, with a results table; `geotrain compare RUN... [--out DIR]`: existing run
// folders in one table and plot (launcher/sweep/compare.hpp). SIGINT/SIGTERM become a stop request
// (SignalWatcher); the launcher itself runs on the main thread, which its children's
// PR_SET_PDEATHSIG is tied to.
#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "cli/signal_watcher.hpp"
#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "core/wan_profile.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/sweep/compare.hpp"
#include "launcher/sweep/sweep.hpp"

namespace geotrain::cli {

namespace fs = std::filesystem;

namespace {
struct RunArgs {
  std::string config;
  std::string out;
  bool no_plots = false;
  std::vector<std::string> sets;  // --set section.key=value
  std::string wan;                // --wan PROFILE (run only)
  std::string resume;             // --resume RUN_DIR (run only)
  bool dry_run = false;           // --dry-run (sweep only)
  uint32_t jobs = 1;              // --jobs N (sweep only)
};

struct CompareArgs {
  std::vector<std::string> runs;
  std::string out;
  bool no_plots = false;
};

// `--set KEY=VALUE`, repeatable, one pair per occurrence.
void add_set_option(CLI::App& cmd, std::vector<std::string>& sets, const char* applies_to) {
  cmd.add_option("--set", sets,
                 fmt::format("override a config key, e.g. --set worker.lr=0.2 or --set "
                             "regions=[a,b] (YAML value; repeatable; {}; checked like the file's "
                             "keys)",
                             applies_to))
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
}

// What every launched run shares: this binary, the plot script, the worker's config check.
launcher::LaunchOptions launch_options(bool plots) {
  launcher::LaunchOptions o;
  o.binary = fs::read_symlink("/proc/self/exe").string();
  o.project_configs = shipped_file("configs");  // WAN profiles by name: configs/wan
  if (plots) o.plot_script = shipped_file("scripts/plot_run.py");
  // The worker's and the server's parsers check the keys those processes will read, before
  // anything starts (`source` is the config file; the server reads model.arch expanded).
  o.validate = check_launch_config;
  return o;
}

int run_run(const RunArgs& args) {
  auto o = launch_options(!args.no_plots);
  if (!args.resume.empty()) {
    GT_REQUIRE(args.config.empty() && args.wan.empty(),
               "--resume {} continues that run with its own config.yaml: give no CONFIG and no "
               "--wan (--set still applies, e.g. --set worker.rounds=200 to train longer)",
               args.resume);
    GT_REQUIRE(args.out.empty(), "--resume {} writes into that run folder: --out does not apply",
               args.resume);
    o.resume = fs::path(args.resume);
    o.config = *o.resume / "config.yaml";
  }
  o.config = !o.resume && args.config.empty() ? shipped_file("configs/demo.yaml")
             : o.resume                       ? o.config
                                              : fs::path(args.config);
  if (!o.resume) require_config_file(o.config);
  if (!args.out.empty()) o.out_dir = args.out;
  o.overrides = parse_overrides(args.sets);
  if (!args.wan.empty()) {
    for (const auto& ov : o.overrides)
      GT_REQUIRE(ov.key != "run.wan_profile", "--wan {} and {}: give one of them", args.wan,
                 ov.origin);
    // As run.wan_profile (a name, or a path), but a path on the command line is relative to the
    // working directory first.
    const auto file = find_wan_profile(
        args.wan, command_line_search(o.config.parent_path(), o.project_configs), "--wan");
    YAML::Emitter quoted;
    quoted << YAML::DoubleQuoted << file.string();
    o.overrides.push_back({"run.wan_profile", quoted.c_str(), "--wan " + args.wan});
  }
  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); });
  return launcher::run_deployment(o, stop.get_token()).exit_code;
}

int run_sweep(const RunArgs& args) {
  launcher::SweepOptions o;
  o.run = launch_options(!args.no_plots);
  o.sweep_file = args.config;
  if (!args.out.empty()) o.out_dir = args.out;
  o.overrides = parse_overrides(args.sets);
  o.dry_run = args.dry_run;
  o.jobs = args.jobs;
  if (!args.no_plots) o.plot_script = shipped_file("scripts/plot_sweep.py");
  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); });
  return launcher::run_sweep(o, stop.get_token());
}

int run_compare(const CompareArgs& args) {
  launcher::CompareOptions o;
  for (const auto& r : args.runs) o.runs.emplace_back(r);
  o.out_dir = args.out.empty() ? fs::path("runs") / launcher::run_folder_name(
                                                        "compare", std::chrono::system_clock::now())
                               : fs::path(args.out);
  if (!args.no_plots) o.plot_script = shipped_file("scripts/plot_compare.py");
  return launcher::run_compare(o);
}
}  // namespace

void add_run_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd =
      app.add_subcommand("run",
                         "launch a whole deployment on this machine: servers, netsim, workers; "
                         "live progress; a run folder with summary, report and plots");
  cmd->add_option("config", args->config, "YAML config (default: configs/demo.yaml)");
  cmd->add_option("--out", args->out,
                  "parent folder of the run folder (default: run.out_dir, else runs)");
  cmd->add_flag("--no-plots", args->no_plots, "skip the matplotlib plots");
  cmd->add_option("--wan", args->wan,
                  "run on this WAN profile instead of run.wan_profile: a name (lan, global-3, "
                  "... from the config's wan/ folder or configs/wan) or a file; run.wan_profile "
                  "(also with --set) takes the same")
      ->type_name("PROFILE");
  cmd->add_option("--resume", args->resume,
                  "continue a stopped run in its folder: servers from their checkpoints, workers "
                  "from their snapshots; refused when it has neither (docs/run.md, \"Recovery\")")
      ->type_name("RUN_DIR");
  add_set_option(*cmd, args->sets, "baked into the run folder's config.yaml");
  commands.emplace_back(cmd, [args] { return run_run(*args); });

  auto sweep_args = std::make_shared<RunArgs>();
  auto* sweep = app.add_subcommand("sweep",
                                   "run a grid of configs one after another (resumable) and write "
                                   "results.csv, results.md and comparison plots");
  sweep->add_option("sweep", sweep_args->config, "sweep file (YAML; see docs/experiments.md)")
      ->required()
      ->check(CLI::ExistingFile);
  sweep->add_option("--out", sweep_args->out,
                    "parent folder of the sweep folder (default: the sweep's out_dir)");
  sweep->add_flag("--no-plots", sweep_args->no_plots, "skip the matplotlib plots");
  add_set_option(*sweep, sweep_args->sets, "applied to the base config of every point");
  sweep->add_flag("--dry-run", sweep_args->dry_run,
                  "write the sweep folder's configs and check each point's as a run would; list "
                  "the points, completed or to run; run nothing");
  sweep
      ->add_option("--jobs", sweep_args->jobs,
                   "run up to N points at once, each with its progress in runs/<label>/"
                   "progress.log (default 1; points that share the cores share their wall time)")
      ->check(CLI::Range(1, 256))
      ->type_name("N");
  commands.emplace_back(sweep, [sweep_args] { return run_sweep(*sweep_args); });

  auto compare_args = std::make_shared<CompareArgs>();
  auto* compare = app.add_subcommand(
      "compare",
      "compare existing run folders: one table (markdown on stdout, compare.csv) and a plot of "
      "accuracy or validation bpb against time and WAN bytes");
  compare->add_option("runs", compare_args->runs, "run folders (the first is the baseline)")
      ->required();
  compare->add_option("--out", compare_args->out,
                      "folder for compare.md, compare.csv and compare.png (default: "
                      "runs/<time>-compare)");
  compare->add_flag("--no-plots", compare_args->no_plots, "skip the matplotlib plot");
  commands.emplace_back(compare, [compare_args] { return run_compare(*compare_args); });
}

}  // namespace geotrain::cli
