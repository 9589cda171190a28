// `geotrain bench <what>`: benchmarks, reported as ratios against a reference measured in the
// same run. The measuring code lives in bench/; this file only parses options.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/codec_bench.hpp"
#include "cli/commands.hpp"

namespace geotrain::cli {

void add_bench_command(CLI::App& app, CommandList& commands) {
  auto* bench = app.add_subcommand("bench", "run a benchmark");
  bench->require_subcommand(1);

  auto codec_opts = std::make_shared<bench::CodecBenchOptions>();
  auto* codecs = bench->add_subcommand("codecs", "encode/decode throughput of every codec vs memcpy");
  codecs->add_option("--elements", codec_opts->elements, "fp32 elements per buffer")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 31));
  codecs->add_option("--repeat", codec_opts->repeats, "timed repetitions per measurement (best is kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  codecs->add_option("--codecs", codec_opts->specs, "codec specs to measure (default: all)");
  codecs->add_flag("--json", codec_opts->json, "print one JSON document instead of a table");
  codecs->add_flag("--no-gpu", codec_opts->skip_gpu, "measure the CPU path only");
  commands.emplace_back(codecs, [codec_opts] { return bench::run_codec_bench(*codec_opts); });

  add_netsim_bench_command(*bench, commands);
}

}  // namespace geotrain::cli
