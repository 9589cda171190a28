// `geotrain export-init` and `geotrain dump-batches`: what a worker of a config starts from and
// what it trains on, written as files a reference implementation reads (scripts/
// torch_reference_gpt.py): the initial parameters as safetensors, with the model's configuration
// in the metadata, and the token windows of a worker's first micro-batches as an int32 .npy
// (steps, B, T + 1). Both go through the worker's own code paths (worker::load_worker_config,
// models::make_model + init(worker.seed), worker::TextWindows with the trainer's world and rank),
// so the files are exactly what that worker uses.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "models/model_file.hpp"
#include "models/model_spec.hpp"
#include "models/npy.hpp"
#include "worker/config.hpp"
#include "worker/data/sampler.hpp"
#include "worker/data/text_corpus.hpp"
#include "worker/data/training_data.hpp"

namespace geotrain::cli {

namespace {

struct ExportInitArgs {
  std::string config;
  std::string out;
};

int run_export_init(const ExportInitArgs& args) {
  const auto config = worker::load_worker_config(args.config);
  const auto model = models::make_model(config.model);
  const ParamTable table = model->make_table(config.model.critical);
  std::vector<float> params(table.total_elements());
  model->init(params, config.seed);

  const size_t tensors =
      models::write_model_file(args.out, *model, table, params, config.model, config.seed);
  std::printf("export-init: %s: %zu tensors, %zu parameters (%s, seed %llu)\n", args.out.c_str(),
              tensors, params.size(), config.model.kind.c_str(),
              static_cast<unsigned long long>(config.seed));
  return 0;
}

struct DumpBatchesArgs {
  std::string config;
  std::string region;
  uint32_t rank = 0;
  uint64_t steps = 0;
  std::string out;
};

int run_dump_batches(const DumpBatchesArgs& args) {
  const auto config = worker::load_worker_config(args.config);
  GT_REQUIRE(config.data.kind == "text" && config.model.is_language_model(),
             "{}: dump-batches is for text data (worker.data.kind text, model.kind gpt); this "
             "config trains model.kind {} on worker.data.kind {}",
             args.config, config.model.kind, config.data.kind);
  const std::string region = args.region.empty() ? config.regions.front() : args.region;
  const uint32_t per_region = config.workers.in(region);
  GT_REQUIRE(args.rank < per_region,
             "--rank {} is not below region {}'s worker.workers_per_region = {}", args.rank, region,
             per_region);
  // The trainer's world and global rank (worker/run/trainer.cpp).
  const uint32_t world = config.workers.total();
  const uint32_t rank = config.workers.first_rank(region) + args.rank;

  const std::string source = config.data.path.string();
  const auto corpus = worker::load_text_corpus(config.data.path, config.data.validation_fraction);
  const size_t window = config.model.window();
  const auto slice = worker::micro_batch_slice(config, world, rank);
  const worker::TextWindows windows(corpus, window, slice, config.seed, source);
  std::vector<int32_t> tokens;  // (steps, B, T + 1)
  tokens.reserve(args.steps * slice.batch * window);
  for (uint64_t j = 0; j < args.steps; ++j) {
    const auto batch = windows.batch(j);
    GT_ASSERT(batch.tokens.size() == slice.batch * window, "batch {}: {} tokens", j,
              batch.tokens.size());
    tokens.insert(tokens.end(), batch.tokens.begin(), batch.tokens.end());
  }
  models::write_npy_int32(args.out, {args.steps, slice.batch, window}, tokens);
  std::printf(
      "dump-batches: %s: int32 (%llu, %u, %zu), the first %llu micro-batches of region %s rank "
      "%u (global rank %u of %u, seed %llu) from %s\n",
      args.out.c_str(), static_cast<unsigned long long>(args.steps), slice.batch, window,
      static_cast<unsigned long long>(args.steps), region.c_str(), args.rank, rank, world,
      static_cast<unsigned long long>(config.seed), source.c_str());
  return 0;
}

}  // namespace

void add_model_commands(CLI::App& app, CommandList& commands) {
  auto init_args = std::make_shared<ExportInitArgs>();
  auto* init = app.add_subcommand(
      "export-init",
      "write the initial parameters every process of a config starts from (safetensors)");
  init->add_option("--config", init_args->config, "YAML config (model, worker.seed)")
      ->required()
      ->check(CLI::ExistingFile);
  init->add_option("--out", init_args->out, "the .safetensors file to write")->required();
  commands.emplace_back(init, [init_args] { return run_export_init(*init_args); });

  auto dump_args = std::make_shared<DumpBatchesArgs>();
  auto* dump = app.add_subcommand(
      "dump-batches",
      "write the token windows a worker trains on for its first micro-batches (int32 .npy)");
  dump->add_option("--config", dump_args->config, "YAML config with worker.data.kind text")
      ->required()
      ->check(CLI::ExistingFile);
  dump->add_option("--region", dump_args->region, "the worker's region (default: the first)");
  dump->add_option("--rank", dump_args->rank, "the worker's rank inside its region")
      ->capture_default_str();
  dump->add_option("--steps", dump_args->steps, "micro-batches to write")
      ->required()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  dump->add_option("--out", dump_args->out, "the .npy file to write")->required();
  commands.emplace_back(dump, [dump_args] { return run_dump_batches(*dump_args); });
}

}  // namespace geotrain::cli
