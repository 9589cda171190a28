#include "bench/zero_bench.hpp"

#include <gloo/rendezvous/store.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

#include "core/error.hpp"
#include "kernels/ops/threads.hpp"
#include "models/gpt.hpp"
#include "models/model_spec.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/backend/step_engine.hpp"
#include "worker/region/local_ranks.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/zero_shards.hpp"

namespace geotrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

models::ModelSpec spec_of(const ZeroBenchOptions& o) {
  models::ModelSpec spec;
  const auto presets = models::gpt_preset_names();
  if (std::find(presets.begin(), presets.end(), o.model) != presets.end()) {
    spec.kind = "gpt";
    spec.gpt = models::gpt_preset(o.model);
    if (o.seq_len > 0) spec.gpt.seq_len = o.seq_len;
    return spec;
  }
  GT_REQUIRE(o.seq_len == 0, "bench zero: --seq-len is for a GPT preset, not MLP '{}'", o.model);
  spec.arch = o.model;  // make_model names what is wrong with it
  return spec;
}

// Worker `rank`'s batch, random from a seed of its own.
worker::Batch random_batch(const models::ModelSpec& spec, const models::Model& model,
                           uint32_t batch, uint32_t rank) {
  std::mt19937_64 rng(1000 + rank);
  worker::Batch b;
  b.size = batch;
  if (spec.kind == "gpt") {
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(spec.gpt.vocab) - 1);
    b.tokens.resize(size_t{batch} * (spec.gpt.seq_len + 1));
    for (auto& t : b.tokens) t = token(rng);
    return b;
  }
  const auto shapes = model.tensor_shapes();
  const uint64_t inputs = shapes.front().back();  // the first layer's (out, in)
  const uint64_t classes = shapes.back().front();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes) - 1);
  b.x.resize(size_t{batch} * inputs);
  for (auto& v : b.x) v = normal(rng);
  for (uint32_t i = 0; i < batch; ++i) b.y.push_back(label(rng));
  return b;
}

struct Turn {
  double seconds = 0;       // the region's timed steps (its slowest worker's)
  uint64_t most_state = 0;  // optimizer values the most loaded worker holds
  double loss = 0;          // worker 0's last
};

// One region of `k` workers at `stage` for warmup + timed steps.
Turn run_region(const ZeroBenchOptions& o, const models::ModelSpec& spec, uint32_t k,
                uint32_t stage, uint32_t turn) {
  std::mutex mu;
  Turn out;
  worker::run_local_ranks(
      static_cast<int>(k), fmt::format("zero-{}-{}-{}", k, stage, turn),
      [&](int rank, gloo::rendezvous::Store& store) {
        const auto r = static_cast<uint32_t>(rank);
        auto model = models::make_model(spec);
        const ParamTable table = model->make_table();
        std::vector<float> params(table.total_elements());
        model->init(params, 1);
        const worker::Batch batch = random_batch(spec, *model, o.batch, r);
        worker::CpuModelBackend backend(std::move(model));
        auto comm = backend.connect_region(store, rank, static_cast<int>(k),
                                           worker::RegionOptions{.reduce_scatter = stage == 2});
        worker::LocalStepConfig lsc;
        lsc.optimizer = {.kind = worker::OptimizerKind::kAdamW, .weight_decay = 0.1f};
        lsc.schedule.base_lr = 1e-4f;
        lsc.max_grad_norm = 1.0;
        lsc.decay_mask = worker::weight_decay_mask(table, lsc.optimizer.no_decay);
        worker::ZeroRegion zero{worker::zero_shards(params.size(), k, stage),
                                [&comm] { return comm.get(); }};
        lsc.take_range(zero.shards, r);
        worker::LocalStep step(lsc, params.size());
        auto engine = worker::make_step_engine(backend, step, lsc.optimizer, lsc.decay_mask, zero);
        Clock::time_point t0;
        double loss = 0;
        for (int s = 0; s < o.warmup_steps + o.steps; ++s) {
          if (s == o.warmup_steps) {
            std::vector<float> barrier{0.0f};  // every worker's clock starts together
            comm->allreduce_sum(barrier);
            t0 = Clock::now();
          }
          loss = engine->accumulate(params, batch, true).mean_loss();
          step.add_micro_batch(loss);
          engine->reduce_gradient();
          engine->apply(params, k);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        const uint64_t held =
            step.optimizer().first_moment().size() + step.optimizer().second_moment().size();
        std::lock_guard lock(mu);
        out.seconds = std::max(out.seconds, seconds);
        out.most_state = std::max(out.most_state, held);
        if (r == 0) out.loss = loss;
      });
  return out;
}

}  // namespace

std::vector<ZeroBenchRow> measure_zero(const ZeroBenchOptions& o) {
  GT_REQUIRE(o.batch >= 1 && o.steps >= 1 && o.warmup_steps >= 0 && o.turns >= 1,
             "bench zero: batch {}, steps {}, warmup {}, turns {} must be positive", o.batch,
             o.steps, o.warmup_steps, o.turns);
  GT_REQUIRE(!o.workers.empty(), "bench zero: no --workers");
  for (uint32_t k : o.workers)
    GT_REQUIRE(k >= 2 && k <= 64, "bench zero: --workers {} is not in [2, 64]", k);
  kernels::cpu::set_threads(1);  // one core's worth per worker, as on a worker's own machine
  const models::ModelSpec spec = spec_of(o);
  const uint64_t parameters = models::make_model(spec)->parameter_count();
  const uint64_t tokens_per_step = uint64_t{o.batch} * (spec.kind == "gpt" ? spec.gpt.seq_len : 1);
  std::vector<ZeroBenchRow> rows;
  for (uint32_t k : o.workers) {
    std::vector<Turn> total(3);
    for (int turn = 0; turn < o.turns; ++turn)
      for (uint32_t stage = 0; stage < 3; ++stage) {
        const Turn t = run_region(o, spec, k, stage, static_cast<uint32_t>(turn));
        std::fprintf(stderr, "bench zero: %u workers, stage %u, turn %d: %.2f s\n", k, stage,
                     turn + 1, t.seconds);
        total[stage].seconds += t.seconds;
        total[stage].most_state = t.most_state;
        total[stage].loss = t.loss;
      }
    for (uint32_t stage = 0; stage < 3; ++stage) {
      ZeroBenchRow row;
      row.workers = k;
      row.stage = stage;
      row.parameters = parameters;
      row.optimizer_state_bytes = total[stage].most_state * sizeof(float);
      row.state_ratio = double(total[stage].most_state) / double(total[0].most_state);
      row.tokens_per_s = double(k * tokens_per_step) * o.steps * o.turns / total[stage].seconds;
      row.speed_ratio = total[0].seconds / total[stage].seconds;
      row.last_loss = total[stage].loss;
      rows.push_back(row);
    }
  }
  return rows;
}

int run_zero_bench(const ZeroBenchOptions& options) {
  const auto rows = measure_zero(options);
  if (options.json) {
    nlohmann::json doc = {{"model", options.model},         {"batch", options.batch},
                          {"steps", options.steps},         {"warmup_steps", options.warmup_steps},
                          {"turns", options.turns},         {"optimizer", "adamw"},
                          {"rows", nlohmann::json::array()}};
    for (const auto& r : rows)
      doc["rows"].push_back({{"workers", r.workers},
                             {"stage", r.stage},
                             {"parameters", r.parameters},
                             {"optimizer_state_bytes", r.optimizer_state_bytes},
                             {"state_ratio", r.state_ratio},
                             {"state_target", 1.0 / r.workers + 0.05},
                             {"tokens_per_s", r.tokens_per_s},
                             {"speed_ratio", r.speed_ratio},
                             {"last_loss", r.last_loss}});
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::printf("geotrain bench zero: %s, AdamW, batch %u per worker, %d x %d timed steps\n",
              options.model.c_str(), options.batch, options.turns, options.steps);
  std::printf("  %7s %5s %14s %8s %8s %12s %8s\n", "workers", "stage", "opt. state MB", "x stage0",
              "target", "tokens/s", "x stage0");
  for (const auto& r : rows)
    std::printf("  %7u %5u %14.2f %8.3f %8.3f %12.0f %8.3f\n", r.workers, r.stage,
                double(r.optimizer_state_bytes) / (1 << 20), r.state_ratio,
                r.stage == 0 ? 1.0 : 1.0 / r.workers + 0.05, r.tokens_per_s, r.speed_ratio);
  std::printf(
      "  optimizer state: the most any one worker holds; tokens/s: the region's. Targets: "
      "state <= 1/k + 0.05, speed >= 0.95\n");
  return 0;
}

}  // namespace geotrain::bench
