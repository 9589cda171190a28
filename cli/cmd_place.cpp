// `geotrain place --wan PROFILE [--config C] [--mb X] [--shards N]`: the shard placement with the
// shortest modelled synchronous exchange on a WAN whose links differ (launcher/run/
// shard_placement.hpp), printed beside the even one as the server.shards_per_region line to put
// in the config (docs/deploy.md, "Placing shards on uneven links").
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config_text.hpp"
#include "core/error.hpp"
#include "core/region_workers.hpp"
#include "core/wan_profile.hpp"
#include "launcher/run/shard_placement.hpp"
#include "models/model_spec.hpp"
#include "netsim/config.hpp"
#include "worker/config.hpp"

namespace geotrain::cli {

namespace {

struct PlaceArgs {
  std::string wan;
  std::string config;
  double mb = 0;
  uint32_t shards = 0;
};

int run_place(const PlaceArgs& args) {
  const auto file = find_wan_profile(
      args.wan, command_line_search(std::filesystem::current_path(), shipped_file("configs")),
      "--wan");
  const auto profile = netsim::load_profile(file);
  std::vector<std::string> regions = profile.regions;
  double bytes = args.mb * 1e6;
  std::string what = fmt::format("{} MB a leader a round (--mb)", args.mb);
  if (!args.config.empty()) {
    const auto config = worker::load_worker_config(args.config);
    regions = config.regions;
    if (args.mb <= 0) {  // the model's parameters in fp32
      const auto model = models::make_model(config.model);
      bytes = 4.0 * static_cast<double>(model->make_table(config.model.critical).total_elements());
      what = fmt::format(
          "{:.2f} MB a leader a round (the config's model in fp32; a codec's "
          "exchange is smaller: give its bytes with --mb)",
          bytes / 1e6);
    }
  }
  GT_REQUIRE(bytes > 0, "place: give the bytes a leader pushes a round with --mb, or --config");
  const auto n = static_cast<uint32_t>(regions.size());
  const uint32_t total = args.shards > 0 ? args.shards : std::min<uint32_t>(4 * n, 32);
  const std::vector<uint32_t> even(n, 1);
  const double even_s = launcher::exchange_seconds(profile, regions, even, bytes);
  const auto best = launcher::best_placement(profile, regions, total, bytes);
  std::printf("place: WAN profile %s, %u regions, %s, %u shards\n", profile.name.c_str(), n,
              what.c_str(), total);
  std::printf("  even  %-48s modelled exchange %.3f s a round\n",
              region_values_text(regions, even).c_str(), even_s);
  std::printf("  best  %-48s modelled exchange %.3f s a round (%.2fx)\n",
              region_values_text(regions, best.shards).c_str(), best.round_s,
              even_s / best.round_s);
  std::printf("server:\n  shards_per_region: %s\n",
              region_values_text(regions, best.shards).c_str());
  return 0;
}

}  // namespace

void add_place_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<PlaceArgs>();
  auto* cmd = app.add_subcommand(
      "place",
      "the server.shards_per_region that shortens a synchronous round on a WAN whose links differ");
  cmd->add_option("--wan", args->wan, "the WAN profile: a name (gaia, global-3) or a file")
      ->required();
  cmd->add_option("--config", args->config,
                  "a deployment config: its regions (else the profile's) and its model's size")
      ->check(CLI::ExistingFile);
  cmd->add_option("--mb", args->mb, "megabytes a leader pushes (and pulls) a round")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shards", args->shards,
                  "shards of the model to place (default 4 a region, 32 at most)")
      ->check(CLI::Range(1, 32));
  commands.emplace_back(cmd, [args] { return run_place(*args); });
}

}  // namespace geotrain::cli
