// `geotrain chaos --config C [--kill-every 20s] [--duration 10m] [--reference RUN_DIR] ...`: the
// chaos harness (launcher/chaos/chaos.hpp, docs/chaos.md). A fault-free reference run and a run
// with SIGKILLs, SIGSTOPs and partitions at seeded random times, both under run.restart; prints the
// goodput (useful rounds per second, chaos over reference) and whether any process was left
// behind, as text or as one JSON document (--json, the keys of chaos.json). Exit code 0 when both
// runs lasted their windows and nothing was left behind, 1 otherwise, 130 when interrupted.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stop_token>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "cli/signal_watcher.hpp"
#include "core/error.hpp"
#include "launcher/chaos/chaos.hpp"

namespace geotrain::cli {

namespace fs = std::filesystem;

namespace {
struct ChaosArgs {
  std::string config;
  std::string out;
  std::string kill_every = "20s";
  std::string duration = "10m";
  std::string reference;
  std::string reference_duration;
  std::string stop_for = "10s";
  std::string partition_for = "10s";
  std::string first_fault;
  std::string mix = "2:1:1";
  std::vector<std::string> kill;
  std::vector<std::string> sets;
  uint64_t seed = 1;
  double min_goodput = -1;
  bool json = false;
  bool plots = false;
  bool verify = false;
};

int run_chaos_command(const ChaosArgs& a) {
  launcher::ChaosOptions o;
  o.run.config = a.config;
  require_config_file(o.run.config);
  o.run.binary = fs::read_symlink("/proc/self/exe").string();
  o.run.project_configs = shipped_file("configs");  // WAN profiles by name: configs/wan
  if (a.plots) {
    const fs::path script = fs::path(GEOTRAIN_SOURCE_DIR) / "scripts/plot_run.py";
    o.run.plot_script =
        fs::exists("scripts/plot_run.py") ? fs::path("scripts/plot_run.py") : script;
  }
  // The worker's and server's parsers check the config before anything starts (as `run` does).
  o.run.validate = check_launch_config;
  o.run.overrides = parse_overrides(a.sets);
  if (a.json) o.run.redraw = false;  // progress stays on stderr, in plain blocks
  if (!a.out.empty()) o.out_dir = a.out;
  o.kill_every_s = launcher::parse_duration(a.kill_every, "--kill-every");
  o.duration_s = launcher::parse_duration(a.duration, "--duration");
  o.stop_s = launcher::parse_duration(a.stop_for, "--stop-for");
  o.partition_s = launcher::parse_duration(a.partition_for, "--partition-for");
  if (!a.reference_duration.empty())
    o.reference_duration_s = launcher::parse_duration(a.reference_duration, "--reference-duration");
  if (!a.first_fault.empty())
    o.first_fault_s = launcher::parse_duration(a.first_fault, "--first-fault");
  if (!a.reference.empty()) o.reference = a.reference;
  o.mix = launcher::parse_fault_mix(a.mix);
  for (const auto& k : a.kill) {  // "server,netsim" or repeated
    std::stringstream in(k);
    for (std::string one; std::getline(in, one, ',');)
      if (!one.empty()) o.kill_kinds.push_back(one);
  }
  o.seed = a.seed;
  if (a.min_goodput >= 0) o.min_goodput = a.min_goodput;
  o.verify = a.verify;

  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); });
  const auto result = launcher::run_chaos(o, stop.get_token());
  if (a.json)
    std::printf("%s\n", result.report.dump(2).c_str());
  else
    std::printf("%s%s\n", launcher::describe_chaos(result.report).c_str(),
                (result.dir / "chaos.json").string().c_str());
  return result.exit_code;
}
}  // namespace

void add_chaos_command(CLI::App& app, CommandList& commands) {
  auto a = std::make_shared<ChaosArgs>();
  auto* cmd = app.add_subcommand(
      "chaos",
      "fault injection under run.restart: a fault-free reference run, then the same config while "
      "processes are killed (SIGKILL) or stopped (SIGSTOP) and links partitioned at seeded random "
      "times; reports goodput and leftover processes (docs/chaos.md)");
  cmd->add_option("--config", a->config, "YAML config, as for geotrain run")->required();
  cmd->add_option("--kill-every", a->kill_every,
                  "mean time between two faults (uniform in 0.5-1.5x): 20s, 1m, ...")
      ->capture_default_str();
  cmd->add_option("--duration", a->duration, "the chaos run's measurement window: 10m, 90s, ...")
      ->capture_default_str();
  cmd->add_option("--reference", a->reference,
                  "take the fault-free rate from this run folder instead of measuring it")
      ->type_name("RUN_DIR");
  cmd->add_option("--reference-duration", a->reference_duration,
                  "the reference run's window (default: --duration)");
  cmd->add_option("--seed", a->seed, "fault schedule and target choice")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--mix", a->mix, "relative weights kill:stop:partition")->capture_default_str();
  cmd->add_option("--kill", a->kill,
                  "kinds of process to SIGKILL (server, netsim, leader, worker); default: all")
      ->type_name("KIND[,KIND]");
  cmd->add_option("--stop-for", a->stop_for, "SIGSTOP length (a server)")->capture_default_str();
  cmd->add_option("--partition-for", a->partition_for, "partition length (one directed link)")
      ->capture_default_str();
  cmd->add_option("--first-fault", a->first_fault,
                  "earliest fault after the start (default: max(--kill-every, 15s))");
  cmd->add_option("--min-goodput", a->min_goodput, "exit 1 when goodput is below this");
  cmd->add_option("--out", a->out,
                  "parent folder of the chaos folder (default: run.out_dir, else runs)");
  cmd->add_option("--set", a->sets, "override a config key (as for geotrain run; repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  cmd->add_flag("--verify", a->verify,
                "let the chaos run finish the rounds the reference does in the window (no faults "
                "after it) and check that every copy of its global model is the same (exit 1 if "
                "not)");
  cmd->add_flag("--json", a->json, "print the result as JSON (chaos.json's keys)");
  cmd->add_flag("--plots", a->plots, "draw each run's plots (off by default)");
  commands.emplace_back(cmd, [a] { return run_chaos_command(*a); });
}

}  // namespace geotrain::cli
