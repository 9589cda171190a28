// `geotrain critical RUN_DIR [--lag-share F]`: the tensors that may lag, chosen by measurement.
// Reads the leaders' tensor_motion events of a finished run (launcher/report/lagging_tensors.hpp),
// ranks the tensors by how far they move in a round against their size, and prints the ranking
// and the model.critical line that lets the slowest-moving share of the elements go
// asynchronously under server.staleness_bound (docs/training.md, "Choosing the tensors that may
// lag").
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "launcher/report/lagging_tensors.hpp"

namespace geotrain::cli {

namespace {

struct CriticalArgs {
  std::string run_dir;
  double share = 0.5;
};

int run_critical(const CriticalArgs& args) {
  const auto rows = launcher::read_tensor_motion(args.run_dir);
  const auto choice = launcher::choose_lagging(rows, args.share);
  std::printf("critical: %s, %zu tensors by relative update a round (RMS change / size)\n",
              args.run_dir.c_str(), rows.size());
  auto ranked = rows;
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.relative_update < b.relative_update;
  });
  for (const auto& r : ranked) {
    const bool lags =
        std::find(choice.lagging.begin(), choice.lagging.end(), r.name) != choice.lagging.end();
    std::printf("  %-28s %12llu  %.3e  %s\n", r.name.c_str(),
                static_cast<unsigned long long>(r.elements), r.relative_update,
                lags ? "may lag" : "critical");
  }
  std::printf(
      "%zu tensors may lag: %.1f%% of the elements (--lag-share %.2f)\nmodel:\n  critical: [",
      choice.lagging.size(),
      100.0 * static_cast<double>(choice.lagging_elements) /
          static_cast<double>(std::max<uint64_t>(choice.total_elements, 1)),
      args.share);
  for (size_t i = 0; i < choice.critical.size(); ++i)
    std::printf("%s\"%s\"", i ? ", " : "", choice.critical[i].c_str());
  std::printf("]\n");
  return 0;
}

}  // namespace

void add_critical_command(CLI::App& app, CommandList& commands) {
  auto args = std::make_shared<CriticalArgs>();
  auto* cmd = app.add_subcommand(
      "critical",
      "the tensors that may lag (model.critical), chosen by how far each moved in a finished run");
  cmd->add_option("run_dir", args->run_dir, "a finished run's folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--lag-share", args->share,
                  "at most this share of the elements may lag (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  commands.emplace_back(cmd, [args] { return run_critical(*args); });
}

}  // namespace geotrain::cli
