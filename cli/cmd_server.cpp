// `geotrain server --config C --region R`: one region's parameter server. Parses the config,
// builds the server and runs its loop until SIGINT/SIGTERM or a Shutdown message.
#include <CLI/CLI.hpp>

#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "cli/launch_env.hpp"
#include "cli/signal_watcher.hpp"
#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "launcher/run/run_settings.hpp"
#include "server/config.hpp"
#include "server/param_server.hpp"

namespace geotrain::cli {

namespace {
struct ServerArgs {
  std::string config;
  std::string region;
  std::string endpoint;
  std::vector<std::string> sets;  // --set section.key=value
};

int run_server(const ServerArgs& args) {
  const auto overrides = parse_overrides(args.sets);
  const auto source = describe_source(args.config, overrides);
  auto config = server::parse_server_config(
      resolved_config_text(
          apply_overrides(launcher::read_text_file(args.config), overrides, source), source),
      source);
  uint32_t region = 0;
  if (!args.region.empty()) {
    region = config.region_index(args.region);
  } else {
    const auto launch = rank_from_environment();
    GT_REQUIRE(launch.has_value(),
               "--region is missing and no launcher rank is set (SLURM_PROCID, "
               "OMPI_COMM_WORLD_RANK, PMI_RANK, "
               "PMIX_RANK, RANK or JOB_COMPLETION_INDEX)");
    GT_REQUIRE(launch->rank < config.regions.size(),
               "{}={}: there are only {} regions, one server each", launch->variable, launch->rank,
               config.regions.size());
    region = launch->rank;
    spdlog::info("server: region {} from {}={}", config.regions[region], launch->variable,
                 launch->rank);
  }
  server::ServerOptions options;
  if (!args.endpoint.empty()) options.endpoint = args.endpoint;
  // A SIGSTOP/SIGCONT (or a starved CPU) longer than a heartbeat period does not make the
  // regions look dead to this server (docs/server.md, "Partitions and stopped servers").
  options.excuse_stalls_over = config.heartbeat;

  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); }, SignalWatcher::kOrphanGrace);
  // server.standby: this process also holds the previous region's standby shards
  // (server/standby.hpp), in a loop of its own, started first so that a restarting primary finds
  // it; its own context, as another server's would be.
  wire::Context standby_context;
  std::exception_ptr standby_failed;
  std::jthread standby;
  if (config.standby.on) {
    server::ServerOptions guest;
    guest.standby = true;
    guest.excuse_stalls_over = config.heartbeat;
    auto srv = std::make_unique<server::ParamServer>(
        config, standby_guest(region, config.regions.size()), standby_context, guest);
    standby = std::jthread([&stop, &standby_failed, srv = std::move(srv)] {
      try {
        srv->run(stop.get_token());
      } catch (...) {
        standby_failed = std::current_exception();
        stop.request_stop();
      }
    });
  }
  wire::Context context;
  try {
    server::ParamServer srv(config, region, context, options);
    srv.run(stop.get_token());
  } catch (...) {
    stop.request_stop();
    throw;
  }
  stop.request_stop();
  if (standby.joinable()) standby.join();
  if (standby_failed) std::rethrow_exception(standby_failed);
  return 0;
}
}  // namespace

void add_server_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<ServerArgs>();
  auto* cmd = app.add_subcommand("server", "run one region's parameter server");
  cmd->add_option("--config", args->config, "YAML config (regions, model, server)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option(
      "--region", args->region,
      "the region this server belongs to (default: from the launcher's rank, e.g. SLURM_PROCID)");
  cmd->add_option("--endpoint", args->endpoint, "bind here instead of server.endpoints[region]");
  cmd->add_option("--set", args->sets,
                  "override a config key, e.g. --set server.staleness_bound=1 (YAML value; "
                  "repeatable; checked like the file's keys)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  commands.emplace_back(cmd, [args] { return run_server(*args); });
}

}  // namespace geotrain::cli
