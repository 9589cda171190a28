// Subcommand registration. Each cli/cmd_*.cpp adds its subcommand to the app and a runner to the
// list; main() runs the one that was parsed. Runners return the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <utility>
#include <vector>

namespace geotrain::cli {

using CommandList = std::vector<std::pair<CLI::App*, std::function<int()>>>;

void add_bench_command(CLI::App& app, CommandList& commands);
void add_server_command(CLI::App& app, CommandList& commands);
void add_worker_command(CLI::App& app, CommandList& commands);
void add_netsim_command(CLI::App& app, CommandList& commands);
void add_run_command(CLI::App& app, CommandList& commands);
// `serve`: `run` with worker.external: true (cmd_serve.cpp, docs/python.md).
void add_serve_command(CLI::App& app, CommandList& commands);
// `export-init` and `dump-batches` (cmd_model.cpp).
void add_model_commands(CLI::App& app, CommandList& commands);
// `keygen`: CURVE keys for security.keys_dir (cmd_keygen.cpp).
void add_keygen_command(CLI::App& app, CommandList& commands);
// `chaos`: the fault-injection harness (cmd_chaos.cpp, docs/chaos.md).
void add_chaos_command(CLI::App& app, CommandList& commands);
// `place`: shard placement from a WAN profile's links (cmd_place.cpp, docs/deploy.md).
void add_place_command(CLI::App& app, CommandList& commands);
// `critical`: the tensors that may lag, from a finished run (cmd_critical.cpp, docs/training.md).
void add_critical_command(CLI::App& app, CommandList& commands);
// `site`: the files one site needs to run its region (cmd_site.cpp, docs/deploy.md).
void add_site_command(CLI::App& app, CommandList& commands);
// `bench netsim`, added by add_bench_command (defined in cmd_netsim.cpp).
void add_netsim_bench_command(CLI::App& bench, CommandList& commands);

}  // namespace geotrain::cli
