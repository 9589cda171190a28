// ZeRO inside a region (worker/training/zero_shards.hpp): the ranges, and a region of 2 or 3
// workers (threads of one process over Gloo on 127.0.0.1, each with its own CPU backend,
// LocalStep and host StepEngine, as the trainer builds them) training sharded against the same
// region unsharded: the parameters after N steps compared bit for bit, or within the tolerance
// the reduction order allows; the optimizer state each worker holds; a snapshot of the sharded
// state restored and trained on.
#include <doctest/doctest.h>
#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../temp_dir.hpp"
#include "core/error.hpp"
#include "core/splitmix64.hpp"
#include "models/model_spec.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/backend/step_engine.hpp"
#include "worker/region/local_ranks.hpp"
#include "worker/run/worker_checkpoint.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/zero_shards.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

models::ModelSpec mlp_spec() {
  models::ModelSpec spec;
  spec.arch = "24-40-10";
  return spec;
}

models::ModelSpec gpt_spec() {
  models::ModelSpec spec;
  spec.kind = "gpt";
  spec.gpt = models::GptConfig{64, 32, 2, 2, 16, 4};
  return spec;
}

// Rank r's micro-batch m of step s: a deterministic function of (r, s, m).
Batch batch_for(const models::ModelSpec& spec, uint32_t rank, uint64_t step, uint32_t micro) {
  uint64_t state = 1000003 * rank + 7919 * step + micro + 1;
  Batch b;
  b.size = 4;
  if (spec.kind == "gpt") {
    for (size_t i = 0; i < b.size * (spec.gpt.seq_len + 1); ++i)
      b.tokens.push_back(static_cast<int32_t>(splitmix64(state) % spec.gpt.vocab));
    return b;
  }
  for (size_t i = 0; i < b.size * 24; ++i)
    b.x.push_back(static_cast<float>(splitmix64(state) % 2001) / 1000.0f - 1.0f);
  for (size_t i = 0; i < b.size; ++i) b.y.push_back(static_cast<int32_t>(splitmix64(state) % 10));
  return b;
}

struct Region {
  models::ModelSpec spec = mlp_spec();
  LocalStepConfig step;  // the optimizer, schedule, clipping, accumulation
  uint32_t workers = 2;
  uint32_t stage = 0;
};

// What one worker ends with.
struct Worker {
  std::vector<float> params;
  WorkerCheckpointState snapshot;  // after `snapshot_at` steps (when > 0)
  uint64_t optimizer_values = 0;   // first + second moment held
};

// Trains `region` for steps [first, last) from `start` (the seed's initialisation when empty;
// else every worker's snapshot, restored), taking a snapshot after `snapshot_at` steps.
std::vector<Worker> train(const Region& region, uint64_t first, uint64_t last,
                          const std::vector<Worker>& start = {}, uint64_t snapshot_at = 0) {
  std::vector<Worker> out(region.workers);
  run_local_ranks(
      static_cast<int>(region.workers), "zero", [&](int rank, gloo::rendezvous::Store& store) {
        const auto r = static_cast<uint32_t>(rank);
        auto model = models::make_model(region.spec);
        const ParamTable table = model->make_table();
        std::vector<float> params(table.total_elements());
        model->init(params, 42);
        CpuModelBackend backend(models::make_model(region.spec));
        auto comm = backend.connect_region(store, rank, static_cast<int>(region.workers),
                                           RegionOptions{.reduce_scatter = region.stage == 2});
        LocalStepConfig lsc = region.step;
        lsc.decay_mask = weight_decay_mask(table, lsc.optimizer.no_decay);
        if (lsc.optimizer.kind == OptimizerKind::kMuon)
          lsc.muon_matrices =
              muon_matrices(table, model->tensor_shapes(), lsc.optimizer.adamw_tensors);
        ZeroRegion zero{zero_shards(params.size(), region.workers, region.stage, lsc.muon_matrices),
                        [&comm] { return comm.get(); }};
        lsc.take_range(zero.shards, r);
        LocalStep step(lsc, params.size());
        auto engine = make_step_engine(backend, step, lsc.optimizer, lsc.decay_mask, zero);
        Worker& w = out[r];  // this thread's alone
        if (!start.empty()) {
          restore_worker_state(start[r].snapshot, "snapshot", step, params);
          step.set_steps(first);
        }
        for (uint64_t s = first; s < last; ++s) {
          for (uint32_t m = 0; m < lsc.accumulation_steps; ++m) {
            const auto res = engine->accumulate(params, batch_for(region.spec, r, s, m),
                                                m + 1 == lsc.accumulation_steps);
            step.add_micro_batch(res.mean_loss());
          }
          engine->reduce_gradient();
          engine->apply(params, region.workers);
          if (s + 1 == snapshot_at) {
            w.snapshot = capture_worker_state(step, 1, 0, {});
            engine->capture(params, w.snapshot);
          }
        }
        w.params = params;
        w.optimizer_values =
            step.optimizer().first_moment().size() + step.optimizer().second_moment().size();
      });
  return out;
}

LocalStepConfig adamw(double max_grad_norm, uint32_t accumulation = 1) {
  LocalStepConfig c;
  c.optimizer = {.kind = OptimizerKind::kAdamW, .weight_decay = 0.1f};
  c.schedule.base_lr = 3e-3f;
  c.max_grad_norm = max_grad_norm;
  c.accumulation_steps = accumulation;
  return c;
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("zero shards split the parameters evenly, keep Muon's matrices whole, stage 0 is one") {
  CHECK(zero_shards(10, 3, 1).counts == std::vector<uint64_t>{3, 3, 4});
  CHECK(zero_shards(10, 3, 0).counts == std::vector<uint64_t>{10});
  CHECK(zero_shards(10, 1, 2).counts == std::vector<uint64_t>{10});
  CHECK_FALSE(zero_shards(10, 1, 2).sharded());
  const auto z = zero_shards(1000, 4, 2);
  CHECK(z.sharded());
  CHECK(z.begin(2) == 500);
  CHECK(z.end(3) == 1000);
  // A matrix [200, 600) holds the equal splits at 250 and 500: 250 moves to 200 (nearer), 500 to
  // 600. One of [200, 800) holds 250 and 500 (a tie: the start) and 750: the second range is
  // empty.
  CHECK(zero_shards(1000, 4, 1, {{"w", 200, 20, 20}}).counts ==
        std::vector<uint64_t>{200, 400, 150, 250});
  CHECK(zero_shards(1000, 4, 1, {{"w", 200, 30, 20}}).counts ==
        std::vector<uint64_t>{200, 0, 600, 200});
  CHECK(zero_shards(10, 1, 0).end(5) == 10);  // not sharded: every rank's range is everything
  CHECK_THROWS_WITH_AS(zero_shards(10, 2, 3), doctest::Contains("zero_stage 3"), InputError);
}

TEST_CASE(
    "ZeRO stage 1 trains to the unsharded region's bits with 2 and 3 workers, each holding "
    "its share of AdamW's state") {
  for (uint32_t workers : {2u, 3u}) {
    CAPTURE(workers);
    Region region{.step = adamw(/*max_grad_norm=*/0.5, /*accumulation=*/2), .workers = workers};
    const auto reference = train(region, 0, 8);
    region.stage = 1;
    const auto sharded = train(region, 0, 8);
    uint64_t held = 0, most = 0;
    for (uint32_t r = 0; r < workers; ++r) {
      CHECK(sharded[r].params == reference[r].params);
      held += sharded[r].optimizer_values;
      most = std::max(most, sharded[r].optimizer_values);
    }
    const uint64_t whole = reference[0].optimizer_values;
    CHECK(whole == 2 * reference[0].params.size());
    CHECK(held == whole);                // every moment held once
    CHECK(most <= whole / workers + 2);  // within an element of 1/k per moment
    CHECK(sharded[0].params != std::vector<float>(sharded[0].params.size(), 0.0f));
  }
}

TEST_CASE(
    "ZeRO stage 2 gives the unsharded bits with 2 workers, and with 3 agrees within the "
    "reduction order's rounding") {
  // Two workers: a + b is b + a, and the clipping norm summed per range rounds below a float's
  // resolution here. Three: Gloo's ring AllReduce and the reduce-scatter add the three gradients
  // in different orders (about 1e-7 relative per step; AdamW's steps are lr-sized, so 10 steps
  // stay within 10 x lr x that; measured: 1.5e-8).
  Region region{.step = adamw(/*max_grad_norm=*/0.5, /*accumulation=*/2), .workers = 2};
  const auto two = train(region, 0, 10);
  region.stage = 2;
  const auto two_sharded = train(region, 0, 10);
  CHECK(two_sharded[0].params == two[0].params);
  CHECK(two_sharded[1].params == two[0].params);
  region = {.step = adamw(/*max_grad_norm=*/0.5), .workers = 3};
  const auto three = train(region, 0, 10);
  region.stage = 2;
  const auto three_sharded = train(region, 0, 10);
  for (uint32_t r = 0; r < 3; ++r) {
    CHECK(three_sharded[r].params == three_sharded[0].params);  // one model in the region
    CHECK(max_abs_difference(three_sharded[r].params, three[r].params) < 1e-6f);
  }
  CHECK(max_abs_difference(three[0].params, train(region, 0, 0)[0].params) > 1e-2f);  // trained
}

TEST_CASE("ZeRO with Muon on a GPT steps each matrix whole on one worker, to the unsharded bits") {
  LocalStepConfig muon;
  muon.optimizer = {.kind = OptimizerKind::kMuon, .muon_lr = 0.02f};
  muon.schedule.base_lr = 3e-3f;
  Region region{.spec = gpt_spec(), .step = muon, .workers = 3};
  const auto reference = train(region, 0, 4);
  for (uint32_t stage : {1u, 2u}) {
    CAPTURE(stage);
    region.stage = stage;
    const auto sharded = train(region, 0, 4);
    for (uint32_t r = 0; r < 3; ++r)
      CHECK(max_abs_difference(sharded[r].params, reference[r].params) <=
            (stage == 1 ? 0.0f : 1e-5f));
  }
}

TEST_CASE(
    "a sharded worker's snapshot holds its range of the optimizer state, and training on "
    "from it gives the uninterrupted run's bits") {
  Region region{.step = adamw(/*max_grad_norm=*/1.0), .workers = 2, .stage = 2};
  const auto whole = train(region, 0, 8, {}, /*snapshot_at=*/4);
  test::TempDir dir("zero-snapshot");
  std::vector<Worker> restored(2);
  for (uint32_t r = 0; r < 2; ++r) {
    CHECK(whole[r].snapshot.optimizer_m.size() == whole[r].params.size() / 2);
    // Through the store's file format and checks, as --resume reads it.
    WorkerCheckpointStore store(dir.path() / std::to_string(r), 2);
    restored[r].snapshot = store.load(store.write(whole[r].snapshot), 0);
  }
  const auto resumed = train(region, 4, 8, restored);
  CHECK(resumed[0].params == whole[0].params);
  CHECK(resumed[1].params == whole[1].params);
  // Rank 1's snapshot is not rank 0's range: its moments differ, and the sizes guard the rest.
  CHECK(whole[0].snapshot.optimizer_m != whole[1].snapshot.optimizer_m);
}
