// `geotrain worker --config C --region R --rank I [--resume] [--generation G] [--rejoin]`: one
// worker process (rank 0 is the region's leader). Trains until the configured number of rounds;
// SIGINT/SIGTERM end it after the current round, with its metrics, a snapshot (with
// worker.checkpoint) and (for leaders) final parameters written; a wait for a server that lasts
// past half a second after the signal ends it at once, without that round
// (worker/leader/reply_wait.hpp). --resume continues from the worker's snapshots; a supervisor that
// restarts a region's workers passes each restart a new --generation (worker/run/trainer.hpp);
// --rejoin brings one restarted worker back into its elastic region's live group.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <stop_token>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "cli/launch_env.hpp"
#include "cli/signal_watcher.hpp"
#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "launcher/run/run_settings.hpp"
#include "worker/config.hpp"
#include "worker/run/trainer.hpp"

namespace geotrain::cli {

namespace {
struct WorkerArgs {
  std::string config;
  std::string region;
  std::optional<uint32_t> rank;
  std::string run_dir;
  std::vector<std::string> sets;  // --set section.key=value
  bool resume = false;
  uint32_t generation = 0;
  bool rejoin = false;
};

int run_worker(const WorkerArgs& args) {
  const auto overrides = parse_overrides(args.sets);
  const auto source = describe_source(args.config, overrides);
  auto config = worker::parse_worker_config(
      resolved_config_text(
          apply_overrides(launcher::read_text_file(args.config), overrides, source), source),
      source);
  if (!args.run_dir.empty()) config.run_dir = args.run_dir;

  std::string region = args.region;
  uint32_t rank = args.rank.value_or(0);
  if (region.empty()) {
    const auto launch = rank_from_environment();
    GT_REQUIRE(launch.has_value(),
               "--region is missing and no launcher rank is set (SLURM_PROCID, "
               "OMPI_COMM_WORLD_RANK, PMI_RANK, "
               "PMIX_RANK, RANK or JOB_COMPLETION_INDEX)");
    GT_REQUIRE(!args.rank.has_value(),
               "--rank needs --region (without both, the launcher's rank decides)");
    GT_REQUIRE(launch->rank < config.workers.total(),
               "{}={}: there are only {} workers (worker.workers_per_region {} over {} regions)",
               launch->variable, launch->rank, config.workers.total(), config.workers.text(),
               config.regions.size());
    std::tie(region, rank) = config.workers.place(launch->rank);
    spdlog::info("worker: region {} rank {} from {}={}", region, rank, launch->variable,
                 launch->rank);
  } else if (!args.rank.has_value()) {
    // One site per cluster: its launcher numbers the region's own workers.
    if (const auto launch = rank_from_environment()) {
      GT_REQUIRE(launch->rank < config.workers.in(region),
                 "{}={}: region {} has only {} workers (worker.workers_per_region {})",
                 launch->variable, launch->rank, region, config.workers.in(region),
                 config.workers.text());
      rank = launch->rank;
      spdlog::info("worker: region {} rank {} from {}={}", region, rank, launch->variable,
                   launch->rank);
    }
  }

  wire::Context context;
  worker::Trainer trainer(config, region, rank, context,
                          {args.resume, args.generation, args.rejoin});
  std::stop_source stop;
  SignalWatcher watcher([&stop](int) { stop.request_stop(); }, SignalWatcher::kOrphanGrace);
  try {
    trainer.run(stop.get_token());
  } catch (const std::exception& e) {
    // Stopped while waiting for a server that does not answer (worker::Stopped), or, on another
    // rank of the region, in a collective with a leader that stopped so: the process ends now,
    // without the round in flight, instead of waiting out worker.timeout_ms.
    if (!stop.stop_requested()) throw;
    spdlog::warn(
        "worker {}-{}: stopped before the end of its round ({}); its last snapshot "
        "stands",
        region, rank, e.what());
  }
  return 0;
}
}  // namespace

void add_worker_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<WorkerArgs>();
  auto* cmd =
      app.add_subcommand("worker", "run one worker of a region (rank 0 is the region's leader)");
  cmd->add_option("--config", args->config, "YAML config (regions, model, server, worker)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option(
      "--region", args->region,
      "the region this worker belongs to (default: from the launcher's rank, e.g. SLURM_PROCID)");
  cmd->add_option("--rank", args->rank,
                  "rank inside the region, 0 = leader (default with --region: the launcher's rank "
                  "within the region, e.g. SLURM_PROCID of a site's own job, else 0)");
  cmd->add_option("--run-dir", args->run_dir, "write metrics here instead of worker.run_dir");
  cmd->add_option("--set", args->sets,
                  "override a config key, e.g. --set worker.lr=0.2 (YAML value; repeatable; "
                  "checked like the file's keys)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  cmd->add_flag("--resume", args->resume,
                "continue from this worker's newest snapshot (worker.checkpoint) that every rank "
                "of the region has; none: start fresh");
  cmd->add_option("--generation", args->generation,
                  "restarts of this region's worker group so far: keeps each restart's "
                  "rendezvous at the server apart (every rank of a group gives the same)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--rejoin", args->rejoin,
                "a restarted worker of an elastic region (worker.elastic, on the CPU): join the "
                "region's live group at its next round boundary and take the leader's state, "
                "instead of restarting the region from snapshots")
      ->excludes("--resume");
  commands.emplace_back(cmd, [args] { return run_worker(*args); });
}

}  // namespace geotrain::cli
