// `geotrain bench <what>`: benchmarks, reported as ratios against a reference measured in the
// same run. The measuring code lives in bench/; this file only parses options.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/codec_bench.hpp"
#include "bench/leader_bench.hpp"
#include "bench/server_bench.hpp"
#include "bench/train_bench.hpp"
#include "bench/wan_bench.hpp"
#include "bench/zero_bench.hpp"
#include "cli/commands.hpp"

namespace geotrain::cli {

namespace {

// `bench codecs`: bench/codec_bench.hpp.
void add_codecs_bench(CLI::App& bench, CommandList& commands) {
  auto codec_opts = std::make_shared<bench::CodecBenchOptions>();
  auto* codecs =
      bench.add_subcommand("codecs", "encode/decode throughput of every codec vs memcpy");
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
  auto* no_gpu = codecs->add_flag("--no-gpu", codec_opts->skip_gpu, "measure the CPU path only");
  codecs->add_flag("--no-cpu", codec_opts->skip_cpu, "measure the CUDA path only")
      ->excludes(no_gpu);
  commands.emplace_back(codecs, [codec_opts] { return bench::run_codec_bench(*codec_opts); });
}

// `bench leader`: bench/leader_bench.hpp.
void add_leader_bench(CLI::App& bench, CommandList& commands) {
  auto leader_opts = std::make_shared<bench::LeaderBenchOptions>();
  auto* leader = bench.add_subcommand(
      "leader", "a region leader's push and pull on the host and on the device (CUDA)");
  leader->add_option("--elements", leader_opts->elements, "parameters in the table")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 31));
  leader->add_option("--segments", leader_opts->segments, "payloads per push")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  leader->add_option("--codecs", leader_opts->codecs, "codec specs")->capture_default_str();
  leader->add_option("--repeat", leader_opts->repeats, "rounds per codec (best is kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  leader->add_flag("--json", leader_opts->json, "print one JSON document instead of a table");
  commands.emplace_back(leader, [leader_opts] { return bench::run_leader_bench(*leader_opts); });
}

// `bench server`: bench/server_bench.hpp.
void add_server_bench(CLI::App& bench, CommandList& commands) {
  auto server_opts = std::make_shared<bench::ServerBenchOptions>();
  auto* server = bench.add_subcommand(
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
  server->add_flag("--curve", server_opts->curve,
                   "also time tcp rows with CURVE on, alternately with it off (curve_ratio)");
  server
      ->add_option("--duration", server_opts->duration,
                   "then a soak of this many seconds of load with RSS at its start and end")
      ->check(CLI::Range(0.0, 86400.0));
  commands.emplace_back(server, [server_opts] { return bench::run_server_bench(*server_opts); });
}

// `bench wan`: bench/wan_bench.hpp.
void add_wan_bench(CLI::App& bench, CommandList& commands) {
  auto wan_opts = std::make_shared<bench::WanBenchOptions>();
  auto* wan = bench.add_subcommand(
      "wan", "one leader's push and pull across an emulated WAN link, by streams and CURVE");
  wan->add_option("--profile", wan_opts->profile, "WAN profile: a name in configs/wan or a path")
      ->capture_default_str();
  wan->add_option("--from", wan_opts->from, "the link's first region (default: longest RTT)");
  wan->add_option("--to", wan_opts->to, "the link's second region");
  wan->add_option("--elements", wan_opts->elements, "values in the payload")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 29));
  wan->add_option("--codec", wan_opts->codec, "codec spec of the payload")->capture_default_str();
  wan->add_option("--streams", wan_opts->streams, "connections per server to try")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  wan->add_option("--security", wan_opts->security, "plain and/or curve")
      ->capture_default_str()
      ->check(CLI::IsMember({"plain", "curve"}));
  wan->add_option("--repeats", wan_opts->repeats, "transfers per direction (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  wan->add_option("--io-threads", wan_opts->io_threads, "ZeroMQ I/O threads per end")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  wan->add_option("--socket-buffer-kib", wan_opts->socket_buffer_kib,
                  "SO_SNDBUF/SO_RCVBUF of both ends (0: the OS default)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  wan->add_flag("--json", wan_opts->json, "print one JSON document instead of a table");
  commands.emplace_back(wan, [wan_opts] { return bench::run_wan_bench(*wan_opts); });
}

// `bench train`: bench/train_bench.hpp.
void add_train_bench(CLI::App& bench, CommandList& commands) {
  auto train_opts = std::make_shared<bench::TrainBenchOptions>();
  auto* train = bench.add_subcommand(
      "train",
      "one worker's training step (CPU or GPU): tokens/s, forward+backward vs AdamW, FLOPs, MFU");
  train
      ->add_option("--model", train_opts->model,
                   "gpt-tiny, gpt-small, gpt2-124m, or an MLP spec such as 784-256-128-10")
      ->capture_default_str();
  train->add_option("--seq-len", train_opts->seq_len, "GPT: context length instead of the preset's")
      ->check(CLI::Range(1u, 1u << 16));
  train->add_option("--batch", train_opts->batch, "sequences (samples) per step")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 16));
  train->add_option("--device", train_opts->device, "cpu or cuda (device-resident, as trained)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  train->add_option("--precision", train_opts->precision, "fp32, or bf16 (cuda, GPT)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  train->add_option("--threads", train_opts->threads, "CPU threads for the model ops")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  train->add_option("--steps", train_opts->steps, "timed steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  train->add_option("--warmup-steps", train_opts->warmup_steps, "untimed first steps")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  train->add_flag("--json", train_opts->json, "print one JSON document instead of a table");
  commands.emplace_back(train, [train_opts] { return bench::run_train_bench(*train_opts); });
}

// `bench zero`: bench/zero_bench.hpp.
void add_zero_bench(CLI::App& bench, CommandList& commands) {
  auto opts = std::make_shared<bench::ZeroBenchOptions>();
  auto* zero = bench.add_subcommand(
      "zero", "ZeRO stage 0, 1, 2 in a CPU region: optimizer state per worker and tokens/s");
  zero->add_option("--model", opts->model, "gpt-tiny, gpt-small, gpt2-124m, or an MLP spec")
      ->capture_default_str();
  zero->add_option("--seq-len", opts->seq_len, "GPT: context length instead of the preset's")
      ->check(CLI::Range(1u, 1u << 16));
  zero->add_option("--batch", opts->batch, "sequences (samples) per worker per step")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 16));
  zero->add_option("--workers", opts->workers, "region sizes to measure (2..64 each)")
      ->capture_default_str()
      ->delimiter(',');
  zero->add_option("--steps", opts->steps, "timed steps per turn")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  zero->add_option("--warmup-steps", opts->warmup_steps, "untimed first steps of each turn")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  zero->add_option("--turns", opts->turns, "rounds of stage 0, 1, 2 (alternating)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  zero->add_flag("--json", opts->json, "print one JSON document instead of a table");
  commands.emplace_back(zero, [opts] { return bench::run_zero_bench(*opts); });
}

}  // namespace

void add_bench_command(CLI::App& app, CommandList& commands) {
  auto* bench = app.add_subcommand("bench", "run a benchmark");
  bench->require_subcommand(1);
  add_codecs_bench(*bench, commands);
  add_leader_bench(*bench, commands);
  add_netsim_bench_command(*bench, commands);
  add_server_bench(*bench, commands);
  add_wan_bench(*bench, commands);
  add_train_bench(*bench, commands);
  add_zero_bench(*bench, commands);
}

}  // namespace geotrain::cli
