// worker/config: the deployment keys the worker shares with the servers and the launcher are read
// by core/deployment_keys, so the worker refuses what the servers refuse.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "models/model_spec.hpp"
#include "server/config.hpp"
#include "worker/config.hpp"
#include "worker/run/local_step_config.hpp"

using namespace geotrain;

TEST_CASE("the worker reads regions and server.endpoints with the servers' rules") {
  const char* model = "model: {arch: 784-10}\n";
  const auto c = worker::parse_worker_config(
      std::string("regions: [a, b]\n") + model + "server: {endpoints: {a: tcp://h:1}}\n", "w.yaml");
  CHECK(c.regions.size() == 2);
  CHECK(c.server_endpoints.at("a") == "tcp://h:1");
  CHECK_THROWS_WITH_AS(
      worker::parse_worker_config(std::string("regions: [a, b, a]\n") + model, "w.yaml"),
      doctest::Contains("w.yaml: regions lists 'a' twice"), InputError);
  CHECK_THROWS_WITH_AS(worker::parse_worker_config(std::string("regions: [a]\n") + model +
                                                       "server: {endpoints: {b: tcp://h:1}}\n",
                                                   "w.yaml"),
                       doctest::Contains("unknown key 'server.endpoints.b'"), InputError);
}

TEST_CASE("the worker's sections parse into their fields, and their errors name the key") {
  const auto c = worker::parse_worker_config(
      "regions: [a]\nmodel: {arch: 784-10}\n"
      "worker: {local_steps: 8, fragments: 4, overlap: eager, fragment_delay: 2, lr: 0.5,\n"
      "         lr_decay: cosine, checkpoint: {every: 3, keep: 2},\n"
      "         anomaly_guard: {window: 10}, step_delay_ms: {a: 7}}\n",
      "w.yaml");
  CHECK(c.fragments == 4);
  CHECK(c.overlap);
  CHECK(c.merge_delay() == 2);
  CHECK(c.lr == doctest::Approx(0.5));
  CHECK(c.decay == worker::LrDecay::kCosine);
  CHECK(c.checkpoint.every == 3);
  CHECK(c.checkpoint.keep == 2);
  CHECK(c.guard.window == 10);
  CHECK(c.step_delay_ms.at("a") == 7);
  CHECK_THROWS_WITH_AS(
      worker::parse_worker_config(
          "regions: [a]\nmodel: {arch: 784-10}\nworker: {local_steps: 2, fragments: 4}\n",
          "w.yaml"),
      doctest::Contains("worker.fragments is 4, must be at most worker.local_steps = 2"),
      InputError);
  CHECK_THROWS_WITH_AS(
      worker::parse_worker_config("regions: [a]\nmodel: {arch: 784-10}\nworker: {checkpoint: 3}\n",
                                  "w.yaml"),
      doctest::Contains("'worker.checkpoint' must be a mapping"), InputError);
}

TEST_CASE("emulated step times and slowdowns parse per region, and their errors name the key") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config("regions: [a, b]\nmodel: {arch: 784-10}\nworker: " + worker,
                                       "w.yaml");
  };
  const auto c = parse(
      "{step_time_ms: {a: 300, b: 900},\n"
      " slowdowns: [{region: b, from_s: 60, until_s: 120, factor: 3}]}\n");
  CHECK(c.step_time_ms.at("a") == 300);
  CHECK(c.step_time_ms.at("b") == 900);
  REQUIRE(c.slowdowns.size() == 1);
  CHECK(c.slowdowns[0].region == "b");
  CHECK(c.slowdowns[0].factor == doctest::Approx(3));
  CHECK_THROWS_WITH_AS(parse("{step_time_ms: {c: 1}}\n"), doctest::Contains("'c'"), InputError);
  CHECK_THROWS_WITH_AS(parse("{slowdowns: [{region: a, from_s: 5, until_s: 5, factor: 2}]}\n"),
                       doctest::Contains("worker.slowdowns[0]: from_s 5 is not before until_s 5"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("{slowdowns: [{region: a, from_s: 1, until_s: 5}]}\n"),
                       doctest::Contains("worker.slowdowns[0].factor is missing"), InputError);
  CHECK_THROWS_WITH_AS(
      parse("{slowdowns: [{region: a, from_s: 1, until_s: 5, factor: 2, by: 3}]}\n"),
      doctest::Contains("worker.slowdowns[0].by"), InputError);
}

TEST_CASE("time-budgeted rounds: a budget in milliseconds, or auto from the fastest region") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config("regions: [a, b]\nmodel: {arch: 784-10}\nworker: " + worker,
                                       "w.yaml");
  };
  const auto fixed = parse("{local_steps: 8}\n");
  CHECK(fixed.round_time_ms == 0);  // the default: H steps every round
  CHECK(fixed.max_total_steps() == fixed.total_steps());
  const auto c = parse("{local_steps: 8, rounds: 10, round_time_ms: 2500, max_local_steps: 12}\n");
  CHECK(c.round_time_ms == doctest::Approx(2500));
  CHECK(c.max_local_steps == 12);
  CHECK(c.max_total_steps() == 120);
  // auto: H steps of the fastest region's emulated step time; at most 2H steps by default.
  const auto a = parse("{local_steps: 8, round_time_ms: auto, step_time_ms: {a: 300, b: 900}}\n");
  CHECK(a.round_time_ms == doctest::Approx(2400));
  CHECK(a.max_local_steps == 16);
  CHECK_THROWS_WITH_AS(parse("{round_time_ms: auto, step_time_ms: {a: 300}}\n"),
                       doctest::Contains("worker.round_time_ms auto needs worker.step_time_ms for "
                                         "every region (1 of 2 have one)"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("{round_time_ms: soon}\n"), doctest::Contains("worker.round_time_ms"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("{max_local_steps: 9}\n"),
                       doctest::Contains("worker.max_local_steps bounds time-budgeted rounds: it "
                                         "needs worker.round_time_ms"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("{local_steps: 8, round_time_ms: 100, max_local_steps: 4}\n"),
                       doctest::Contains("worker.max_local_steps"), InputError);
}

TEST_CASE("a learning-rate schedule the worker would refuse is refused when the config is read") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config("regions: [a]\nmodel: {arch: 784-10}\nworker: " + worker,
                                       "w.yaml");
  };
  CHECK_THROWS_WITH_AS(
      parse("{rounds: 1, local_steps: 1, warmup_steps: 20, lr_decay: cosine}\n"),
      doctest::Contains("w.yaml: worker.lr_decay cosine needs more steps than "
                        "worker.warmup_steps = 20: the run has rounds x local_steps = 1 x 1 = 1"),
      InputError);
  CHECK_THROWS_WITH_AS(parse("{lr: 0.1, min_lr: 0.2}\n"),
                       doctest::Contains("worker.min_lr is 0.2, must be at most worker.lr = 0.1"),
                       InputError);
  CHECK(parse("{rounds: 3, local_steps: 8, warmup_steps: 20, lr_decay: cosine}\n").warmup_steps ==
        20);
  CHECK(parse("{rounds: 1, local_steps: 1, warmup_steps: 20}\n").warmup_steps == 20);  // constant
}

TEST_CASE("cyclic learning rates need their cycle; the peak's scaling has one spelling at a time") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config("regions: [a]\nmodel: {arch: 784-10}\nworker: " + worker,
                                       "w.yaml");
  };
  const auto c = parse("{lr_decay: cyclic, lr_cycle: {period: 160, multiplier: 2}}\n");
  CHECK(c.decay == worker::LrDecay::kCyclic);
  CHECK(c.lr_cycle_steps == 160);
  CHECK(c.lr_cycle_mult == 2);
  CHECK(parse("{lr_decay: cyclic, lr_cycle: {period: 40}}\n").lr_cycle_mult == 1);
  CHECK_THROWS_WITH_AS(parse("{lr_decay: cyclic}\n"),
                       doctest::Contains("worker.lr_decay cyclic needs worker.lr_cycle"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_decay: cyclic, lr_cycle: {multiplier: 2}}\n"),
                       doctest::Contains("worker.lr_cycle has no period"), InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_decay: cyclic, lr_cycle: {period: 0}}\n"),
                       doctest::Contains("worker.lr_cycle.period"), InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_decay: cyclic, lr_cycle: {period: 8, mult: 2}}\n"),
                       doctest::Contains("worker.lr_cycle.mult"), InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_decay: cosine, lr_cycle: {period: 8}}\n"),
                       doctest::Contains("worker.lr_cycle is for worker.lr_decay cyclic"),
                       InputError);

  CHECK_FALSE(parse("{}\n").lr_scaling.has_value());
  CHECK(parse("{scale_lr: true}\n").lr_scaling == worker::LrScaling::kLinear);  // older spelling
  CHECK_FALSE(parse("{scale_lr: false}\n").lr_scaling.has_value());
  const auto sqrt = parse("{lr_scaling: sqrt, lr_reference_batch: 256}\n");
  CHECK(sqrt.lr_scaling == worker::LrScaling::kSqrt);
  CHECK(sqrt.lr_reference_batch == 256);
  CHECK(parse("{lr_scaling: linear}\n").lr_reference_batch == 64);
  CHECK_FALSE(parse("{lr_scaling: none}\n").lr_scaling.has_value());
  CHECK_THROWS_WITH_AS(parse("{scale_lr: true, lr_scaling: sqrt}\n"),
                       doctest::Contains("two spellings of one setting"), InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_reference_batch: 128}\n"),
                       doctest::Contains("the learning rate is not scaled"), InputError);
  CHECK_THROWS_WITH_AS(parse("{lr_scaling: cubic}\n"), doctest::Contains("worker.lr_scaling"),
                       InputError);

  // What the worker steps with: 3 regions x 2 workers x 32 = 192 against 48, sqrt: x2.
  const auto fleet = worker::parse_worker_config(
      "regions: [a, b, c]\nmodel: {arch: 784-10}\nworker: {workers_per_region: 2, batch_size: "
      "32, lr: 0.1, lr_decay: cyclic, lr_cycle: {period: 10, multiplier: 3}, lr_scaling: sqrt, "
      "lr_reference_batch: 48}\n",
      "w.yaml");
  const auto model = models::make_model(fleet.model);
  const auto lsc =
      worker::local_step_config(fleet, model->make_table({}), *model, fleet.workers.total());
  CHECK(lsc.schedule.peak_lr() == doctest::Approx(0.2));
  CHECK(lsc.schedule.at(10) == doctest::Approx(0.2));  // the second cycle's restart
  CHECK(lsc.schedule.at(40) == doctest::Approx(0.2));  // the third's: 10 + 30
}

TEST_CASE("worker.overlap takes true, false, eager or delayed, not yaml-cpp's other booleans") {
  const auto parse = [](const std::string& value) {
    return worker::parse_worker_config(
        "regions: [a]\nmodel: {arch: 784-10}\nworker: {overlap: " + value + "}\n", "w.yaml");
  };
  CHECK(parse("true").overlap);
  CHECK_FALSE(parse("false").overlap);
  CHECK(parse("delayed").overlap);
  for (const char* v : {"yes", "on", "True"}) {
    const auto message =
        fmt::format("worker.overlap is '{}', allowed: false, true, eager, delayed", v);
    CHECK_THROWS_WITH_AS(parse(v), doctest::Contains(message.c_str()), InputError);
  }
}

TEST_CASE("worker.streams_per_server is 1..64 or auto (the default), with link_mbps for auto") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config(
        "regions: [a]\nmodel: {arch: 784-10}\nworker: {" + worker + "}\n", "w.yaml");
  };
  CHECK(parse("").streams_per_server == 0);  // auto
  CHECK(parse("streams_per_server: auto").streams_per_server == 0);
  CHECK(parse("streams_per_server: 8").streams_per_server == 8);
  CHECK(parse("link_mbps: 400").link_mbps == doctest::Approx(400));
  CHECK(parse("socket_buffer_kib: 32768").socket_buffer_kib == 32768);
  CHECK_THROWS_WITH_AS(parse("streams_per_server: 65"),
                       doctest::Contains("worker.streams_per_server (1..64 or auto)"), InputError);
  CHECK_THROWS_WITH_AS(parse("streams_per_server: many"),
                       doctest::Contains("worker.streams_per_server"), InputError);
}

TEST_CASE("worker.zero_stage is 0, 1 or 2, on the CPU and with worker.elastic false") {
  const auto parse = [](const std::string& worker) {
    return worker::parse_worker_config(
        "regions: [a]\nmodel: {arch: 784-10}\nworker: {" + worker + "}\n", "w.yaml");
  };
  CHECK(parse("").zero_stage == 0);
  CHECK(parse("zero_stage: 2, elastic: false").zero_stage == 2);
  CHECK(parse("zero_stage: 0").zero_stage == 0);  // elastic stays on
  CHECK_THROWS_WITH_AS(parse("zero_stage: 3, elastic: false"),
                       doctest::Contains("worker.zero_stage"), InputError);
  CHECK_THROWS_WITH_AS(parse("zero_stage: 1"), doctest::Contains("set worker.elastic: false"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("zero_stage: 1, elastic: false, device: cuda"),
                       doctest::Contains("on the CPU only"), InputError);
}

TEST_CASE("an anomaly guard that could never judge a step is refused when the config is read") {
  const auto parse = [](const std::string& guard) {
    return worker::parse_worker_config(
        "regions: [a]\nmodel: {arch: 784-10}\nworker: {anomaly_guard: {" + guard + "}}\n",
        "w.yaml");
  };
  CHECK(parse("window: 10, min_samples: 10").guard.min_samples == 10);
  CHECK(parse("min_samples: 2").guard.min_samples == 2);
  // One sample has no spread: the guard itself refuses it, so the config must too.
  CHECK_THROWS_WITH_AS(parse("min_samples: 1"),
                       doctest::Contains("worker.anomaly_guard.min_samples"), InputError);
  CHECK_THROWS_WITH_AS(parse("window: 8, min_samples: 9"),
                       doctest::Contains("min_samples is 9, more than its window (8)"), InputError);
  CHECK_THROWS_WITH_AS(parse("min_samples: 60"),  // the default window is 50
                       doctest::Contains("more than its window (50)"), InputError);
}

TEST_CASE("servers and workers read the shared protocol settings from one file alike") {
  const std::string text =
      "regions: [a, b]\n"
      "model: {arch: 784-10, tensors: [{name: w, size: 7840}]}\n"
      "server: {staleness_bound: 3, optimizer: {lr: 0.8, momentum: 0.5, nesterov: true}}\n"
      "worker: {local_steps: 8, fragments: 4, stream_critical: false}\n";
  const auto w = worker::parse_worker_config(text, "d.yaml");
  const auto s = server::parse_server_config(text, "d.yaml");
  CHECK(w.staleness_bound == 3);
  CHECK(s.shard.staleness_bound == w.staleness_bound);
  CHECK(s.shard.optimizer.lr == w.outer.lr);
  CHECK(s.shard.optimizer.momentum == w.outer.momentum);
  CHECK(s.shard.optimizer.nesterov == w.outer.nesterov);
  CHECK(w.outer.nesterov);
  CHECK(w.fragments == 4);
  CHECK(s.fragments == w.fragments);
  CHECK_FALSE(w.stream_critical);
  CHECK(s.stream_critical == w.stream_critical);
  // One rule for both: a key the servers refuse, the workers refuse too.
  const std::string typo =
      "regions: [a]\nmodel: {arch: 784-10, tensors: [{name: w, size: 7840}]}\n"
      "server: {optimizer: {momentun: 0.9}}\n";
  CHECK_THROWS_WITH_AS(worker::parse_worker_config(typo, "d.yaml"),
                       doctest::Contains("server.optimizer.momentun"), InputError);
  CHECK_THROWS_WITH_AS(server::parse_server_config(typo, "d.yaml"),
                       doctest::Contains("server.optimizer.momentun"), InputError);
}
