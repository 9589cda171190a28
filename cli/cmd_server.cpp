// `geotrain server --config C --region R`: one region's parameter server. Parses the config,
// builds the server and runs its loop until SIGINT/SIGTERM or a Shutdown message. Signals are
// taken synchronously by a sigwait thread (no handler state, no globals).
#include <CLI/CLI.hpp>
#include <signal.h>

#include <memory>
#include <stop_token>
#include <thread>

#include "cli/commands.hpp"
#include "server/config.hpp"
#include "server/param_server.hpp"

namespace geotrain::cli {

namespace {
struct ServerArgs {
  std::string config;
  std::string region;
  std::string endpoint;
};

int run_server(const ServerArgs& args) {
  auto config = server::load_server_config(args.config);
  const uint32_t region = config.region_index(args.region);
  server::ServerOptions options;
  if (!args.endpoint.empty()) options.endpoint = args.endpoint;

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below

  zmq::context_t context;
  server::ParamServer srv(config, region, context, options);
  std::stop_source stop;
  std::jthread watcher([&stop, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != 0) stop.request_stop();
  });
  srv.run(stop.get_token());
  // Wake the watcher if the loop ended for another reason (a Shutdown message).
  if (!stop.stop_requested()) pthread_kill(watcher.native_handle(), SIGTERM);
  return 0;
}
}  // namespace

void add_server_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<ServerArgs>();
  auto* cmd = app.add_subcommand("server", "run one region's parameter server");
  cmd->add_option("--config", args->config, "YAML config (regions, model, server)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--region", args->region, "the region this server belongs to")->required();
  cmd->add_option("--endpoint", args->endpoint, "bind here instead of server.endpoints[region]");
  commands.emplace_back(cmd, [args] { return run_server(*args); });
}

}  // namespace geotrain::cli
