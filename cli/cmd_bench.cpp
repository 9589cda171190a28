// `geotrain bench <what>`: benchmarks, reported as ratios against a reference measured in the
// same run. The measuring code lives in bench/; this file only parses options.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/codec_bench.hpp"
#include "bench/server_bench.hpp"
#include "cli/commands.hpp"

namespace geotrain::cli {

void add_bench_command(CLI::App& app, CommandList& commands) {
  auto* bench = app.add_subcommand("bench", "run a benchmark");
  bench->require_subcommand(1);

  auto codec_opts = std::make_shared<bench::CodecBenchOptions>();
  auto* codecs =
      bench->add_subcommand("codecs", "encode/decode throughput of every codec vs memcpy");
  codecs->add_option("--elements", codec_opts->elements, "fp32 elements per buffer")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 31));
  codecs
      ->add_option("--repeat", codec_opts->repeats,
                   "timed repetitions per measurement (best is kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  codecs->add_option("--codecs", codec_opts->specs, "codec specs to measure (default: all)");
  codecs->add_flag("--json", codec_opts->json, "print one JSON document instead of a table");
  codecs->add_flag("--no-gpu", codec_opts->skip_gpu, "measure the CPU path only");
  commands.emplace_back(codecs, [codec_opts] { return bench::run_codec_bench(*codec_opts); });

  add_netsim_bench_command(*bench, commands);

  auto server_opts = std::make_shared<bench::ServerBenchOptions>();
  auto* server = bench->add_subcommand(
      "server",
      "push+pull round trips against a ParamServer vs raw ZeroMQ DEALER/ROUTER, same bytes");
  server->add_option("--sizes", server_opts->sizes, "shard sizes in fp32 bytes")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 30));
  server->add_option("--codecs", server_opts->codecs, "codec specs for push and pull")
      ->capture_default_str();
  server->add_option("--transports", server_opts->transports, "tcp (loopback) and/or inproc")
      ->capture_default_str()
      ->check(CLI::IsMember({"tcp", "inproc"}));
  server->add_option("--seconds", server_opts->seconds, "timed seconds per measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  server->add_flag("--json", server_opts->json, "print one JSON document instead of a table");
  commands.emplace_back(server, [server_opts] { return bench::run_server_bench(*server_opts); });
}

}  // namespace geotrain::cli
