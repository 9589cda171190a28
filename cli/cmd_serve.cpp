// `geotrain serve CONFIG [--out DIR] [--set section.key=value ...]`: `geotrain run` with
// `worker.external: true` (docs/python.md): starts the servers and netsim of CONFIG only, writes
// the run folder (its config.yaml is what the external leaders read; endpoints.json appears once
// the servers accept connections), prints the endpoints each region's leader must use, shows the
// leaders' progress, and when every region's leader has logged `done` stops the servers and
// writes the summary, report and plots.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <stop_token>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "cli/signal_watcher.hpp"
#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "launcher/run/launcher.hpp"

namespace geotrain::cli {

namespace fs = std::filesystem;

namespace {
struct ServeArgs {
  std::string config;
  std::string out;
  std::vector<std::string> set;
  bool no_plots = false;
};

int run_serve(const ServeArgs& args) {
  launcher::LaunchOptions o;
  o.binary = fs::read_symlink("/proc/self/exe").string();
  o.project_configs = shipped_file("configs");  // WAN profiles by name: configs/wan
  if (!args.no_plots) {
    for (const fs::path& p :
         {fs::path("scripts/plot_run.py"), fs::path(GEOTRAIN_SOURCE_DIR) / "scripts/plot_run.py"})
      if (fs::exists(p)) {
        o.plot_script = p;
        break;
      }
  }
  o.validate = check_launch_config;
  o.config = args.config;
  o.overrides = parse_overrides(args.set);
  o.overrides.push_back({"worker.external", "true", "geotrain serve"});
  if (!args.out.empty()) o.out_dir = args.out;
  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); });
  return launcher::run_deployment(o, stop.get_token()).exit_code;
}
}  // namespace

void add_serve_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand(
      "serve",
      "start a deployment's servers and netsim for external leaders (Python, docs/python.md): "
      "`geotrain run` with worker.external: true");
  cmd->add_option("config", args->config, "YAML config")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out,
                  "parent folder of the run folder (default: run.out_dir, else runs)");
  cmd->add_option("--set", args->set, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--no-plots", args->no_plots, "skip the matplotlib plots");
  commands.emplace_back(cmd, [args] { return run_serve(*args); });
}

}  // namespace geotrain::cli
