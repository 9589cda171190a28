// The `geotrain` binary: one CLI11 app, one subcommand per process kind or tool.
// main() parses the command line, sets up logging once, and hands over to the subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"geotrain: geo-distributed asynchronous parameter-server training"};
  app.set_version_flag("--version", std::string("geotrain ") + geotrain::kVersion +
                                        (geotrain::kBuiltWithCuda ? " (CUDA)" : " (CPU only)"));
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();

  geotrain::cli::CommandList commands;
  geotrain::cli::add_bench_command(app, commands);
  geotrain::cli::add_server_command(app, commands);
  geotrain::cli::add_worker_command(app, commands);
  geotrain::cli::add_netsim_command(app, commands);
  geotrain::cli::add_run_command(app, commands);
  geotrain::cli::add_serve_command(app, commands);
  geotrain::cli::add_model_commands(app, commands);
  geotrain::cli::add_keygen_command(app, commands);
  geotrain::cli::add_chaos_command(app, commands);

  if (argc == 1) {  // no subcommand: show what there is, rather than only that one is missing
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    geotrain::LogOptions log;
    log.level = geotrain::parse_log_level(log_level);
    geotrain::setup_logging(log);
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
    return 2;
  } catch (const geotrain::InputError& e) {
    std::fprintf(stderr, "geotrain: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "geotrain: failed: %s\n", e.what());
    return 1;
  }
}
