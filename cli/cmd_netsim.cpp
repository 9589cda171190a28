// `geotrain netsim --config NETSIM.yaml`: runs the WAN emulator until SIGINT or SIGTERM, and
// `geotrain bench netsim`: its fidelity benchmark (measuring code in bench/netsim_bench.cpp).
#include <CLI/CLI.hpp>

#include <future>
#include <memory>
#include <mutex>

#include "bench/netsim_bench.hpp"
#include "cli/commands.hpp"
#include "cli/signal_watcher.hpp"
#include "core/log.hpp"
#include "netsim/config.hpp"
#include "netsim/proxy.hpp"
#include "netsim/socket.hpp"

namespace geotrain::cli {

namespace {
int run_netsim(const std::string& path) {
  auto cfg = netsim::load_netsim_config(path);
  std::promise<int> stopped;
  SignalWatcher watcher([&stopped, once = std::make_shared<std::once_flag>()](
                            int sig) { std::call_once(*once, [&] { stopped.set_value(sig); }); },
                        SignalWatcher::kOrphanGrace);
  netsim::WanProxy proxy(cfg.links, cfg.options);
  for (std::size_t i = 0; i < cfg.links.size(); ++i) {
    const auto& l = cfg.links[i];
    const auto& p = l.properties;
    spdlog::info("netsim {}: {} -> {}: delay {} ms, jitter {} ms, {}, window {}, {} fault(s)",
                 l.name(), netsim::to_string(proxy.listen_endpoint(i)), netsim::to_string(l.target),
                 p.delay_ms, p.jitter_ms,
                 p.bandwidth_mbps > 0 ? fmt::format("{} Mbit/s", p.bandwidth_mbps) : "unlimited",
                 p.window_kib > 0 ? fmt::format("{} KiB", p.window_kib) : "none", l.faults.size());
  }
  proxy.start();
  spdlog::info("netsim: profile '{}', {} link(s) up; SIGINT or SIGTERM stops", cfg.profile.name,
               cfg.links.size());
  const int sig = stopped.get_future().get();
  spdlog::info("netsim: signal {}, stopping", sig);
  proxy.stop();
  return 0;
}
}  // namespace

void add_netsim_command(CLI::App& app, CommandList& commands) {
  auto* cmd = app.add_subcommand(
      "netsim", "run the WAN emulator (a TCP proxy per link) until SIGINT/SIGTERM");
  auto path = std::make_shared<std::string>();
  cmd->add_option("--config", *path, "netsim config (YAML; see docs/netsim.md)")
      ->required()
      ->check(CLI::ExistingFile);
  commands.emplace_back(cmd, [path] { return run_netsim(*path); });
}

void add_netsim_bench_command(CLI::App& bench, CommandList& commands) {
  auto opts = std::make_shared<bench::NetsimBenchOptions>();
  auto* cmd = bench.add_subcommand(
      "netsim",
      "configured vs measured delay, bandwidth and window of every standard WAN profile link");
  cmd->add_option("--profiles", opts->profiles,
                  "profile names in --profiles-dir (default: all standard ones)");
  cmd->add_option("--profiles-dir", opts->profiles_dir,
                  "folder of WAN profiles (default: the source tree's configs/wan)");
  cmd->add_option("--seconds", opts->seconds,
                  "duration of each bulk measurement (and GiB of the proxy-cost transfer, 0.25..2)")
      ->capture_default_str()
      ->check(CLI::Range(0.2, 60.0));
  cmd->add_option("--max-mbps", opts->max_mbps, "measure faster links at this rate")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 10000.0));
  cmd->add_flag("!--no-proxy-cost", opts->proxy_cost,
                "skip the proxy's own cost (round trip and forwarding rate against direct)");
  cmd->add_flag("--json", opts->json, "print one JSON document instead of a table");
  commands.emplace_back(cmd, [opts] { return bench::run_netsim_bench(*opts); });
}

}  // namespace geotrain::cli
