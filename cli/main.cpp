// The `geotrain` binary: one CLI11 app, one subcommand per process kind or tool.
// main() parses the command line, sets up logging once, and hands over to the subcommand.
//
// Exit codes (docs/run.md, "Exit codes"): 0 success (also --help, --version); 2 a usage or
// config error, found before anything starts (CLI11's own codes, 105-115, become 2 as well);
// otherwise the subcommand's: 1 failed, 124 timed out, 130 interrupted.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/closest_name.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"

namespace {
// After a failed parse: when no subcommand was recognised and the first word left over is not
// an option, that word was meant as a subcommand. Returns the message naming it, the nearest
// subcommand (a typo) and all of them; CLI11 itself says only "A subcommand is required".
std::optional<std::string> unknown_subcommand(CLI::App& app) {
  if (!app.get_subcommands().empty()) return std::nullopt;
  for (const auto& word : app.remaining()) {
    if (word.starts_with("-")) continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const auto guess = geotrain::closest_name(word, names);
    return fmt::format("unknown subcommand '{}'{}; the subcommands are {} (geotrain --help)", word,
                       guess ? " (did you mean '" + *guess + "'?)" : "", list);
  }
  return std::nullopt;
}
}  // namespace

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
  geotrain::cli::add_place_command(app, commands);
  geotrain::cli::add_critical_command(app, commands);
  geotrain::cli::add_site_command(app, commands);

  if (argc == 1) {  // no subcommand: show what there is, rather than only that one is missing
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const auto message = unknown_subcommand(app)) {
      std::fprintf(stderr, "geotrain: error: %s\n", message->c_str());
      return 2;
    }
    // --help and --version end the parse with code 0; every usage error exits 2, as a config
    // error does.
    return app.exit(e) == 0 ? 0 : 2;
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
