// The whole pipeline as a user runs it: real `geotrain server` and `geotrain worker` processes
// on loopback, from one config file. Each test reads what the processes wrote (final
// parameters, metrics JSONL, logs).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "cluster.hpp"
#include "models/mlp.hpp"
#include "models/safetensors.hpp"
#include "process.hpp"
#include "temp_dir.hpp"
#include "worker/data/batch_loader.hpp"
#include "worker/data/idx_dataset.hpp"
#include "worker/data/sampler.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {
// Runs `regions` x `workers` with fp32, H = 1, synchronous rounds and plain SGD, and returns the
// relative distance of region a's final parameters to one process stepping on the mean gradient
// of all workers' batches (and, in *between, the distance between the regions' parameters).
// `server_extra`: more keys under server: (e.g. an uneven shards_per_region); `last_server_says`:
// a line the last region's server must log.
double distance_to_one_process(uint32_t regions, uint32_t workers, uint32_t steps, double* between,
                               const std::string& server_extra = "",
                               const std::string& last_server_says = "") {
  test::TempDir dir("exact");
  const uint32_t batch = 16;
  const float lr = 0.05f;
  Cluster c;
  for (uint32_t r = 0; r < regions; ++r) c.regions.push_back(std::string(1, char('a' + r)));
  c.workers = workers;
  c.server_extra = server_extra;
  // Synchronous rounds: every tensor critical (non-critical ones are applied on arrival).
  c.model = R"({arch: "784-32-10", critical: ["*"]})";
  c.worker_yaml = fmt::format(
      "  batch_size: {}\n  local_steps: 1\n  rounds: {}\n  lr: {}\n  optimizer: {{momentum: 0}}\n  "
      "eval_every: 0\n"
      "  seed: 3\n  anomaly_guard: {{enabled: false}}\n",
      batch, steps, lr);
  require_success(run_cluster(c, dir.path()));
  if (!last_server_says.empty()) {
    std::ifstream f(dir.path() / ("server-" + c.regions.back() + ".log"));
    const std::string log((std::istreambuf_iterator<char>(f)), {});
    CHECK_MESSAGE(log.find(last_server_says) != std::string::npos, log);
  }
  const auto a = read_params(dir.path() / "params-a.f32");
  const auto last = read_params(dir.path() / fmt::format("params-{}.f32", c.regions.back()));
  // Nothing to flush at the end (fp32, synchronous rounds, outer SGD at lr 1): the global model
  // (docs/training.md, "The end of a run") is each region's parameters, bit for bit.
  {
    const auto global = models::read_safetensors(dir.path() / "model.safetensors");
    std::vector<float> flat;
    for (const auto& t : global.tensors) flat.insert(flat.end(), t.values.begin(), t.values.end());
    CHECK(global.metadata.at("weights") == "global model");
    REQUIRE(flat.size() == a.size());
    CHECK(std::memcmp(flat.data(), a.data(), a.size() * sizeof(float)) == 0);
  }

  // The reference: one process, every worker's batch of each step, one SGD step on their mean.
  models::Mlp model(models::parse_mlp_config("784-32-10"));
  std::vector<float> p(model.parameter_count()), g(p.size()), sum(p.size());
  model.init(p, 3);
  const auto data = worker::load_fashion_mnist(kData, worker::Split::kTrain);
  const uint32_t world = regions * workers;
  std::vector<std::unique_ptr<worker::DistributedSampler>> samplers;
  std::vector<std::unique_ptr<worker::BatchLoader>> loaders;
  for (uint32_t rank = 0; rank < world; ++rank) {
    samplers.push_back(std::make_unique<worker::DistributedSampler>(
        worker::SamplerOptions{data.count, world, rank, true, 3, false}));
    worker::LoaderOptions lo;
    lo.batch_size = batch;
    loaders.push_back(std::make_unique<worker::BatchLoader>(data, *samplers.back(), lo));
  }
  for (uint32_t s = 0; s < steps; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (auto& loader : loaders) {
      auto bt = loader->next();
      REQUIRE(bt);
      std::fill(g.begin(), g.end(), 0.0f);
      model.forward_backward(p, bt->x.data(), bt->y.data(), bt->size, g);
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * (sum[i] / float(world));
  }
  REQUIRE(a.size() == p.size());
  double diff = 0, norm = 0, ab = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    diff += double(a[i] - p[i]) * double(a[i] - p[i]);
    norm += double(p[i]) * double(p[i]);
    ab += double(a[i] - last[i]) * double(a[i] - last[i]);
  }
  if (between) *between = std::sqrt(ab / norm);
  return std::sqrt(diff / norm);
}
}  // namespace

TEST_CASE(
    "2 regions x 2 workers with fp32, H=1 and synchronous rounds equal one process on the same "
    "batches") {
  for (auto [r, w, s] : {std::tuple{1u, 2u, 5u}, {2u, 2u, 50u}}) {
    double between = 0;
    const double rel = distance_to_one_process(r, w, s, &between);
    MESSAGE(r, " regions x ", w, " workers, ", s, " steps: relative error ", rel,
            ", between regions ", between);
    CHECK(rel <= 1e-5);
    CHECK(between <= 1e-6);  // every region holds the same global parameters
  }
  // The shards placed unevenly (b's server holds 3/4 of the model): the same arithmetic.
  double between = 0;
  const double rel = distance_to_one_process(
      2, 1, 20, &between, "  shards_per_region: {a: 1, b: 3}\n", "server b: 3 shard(s)");
  MESSAGE("shards 1 / 3: relative error ", rel, ", between regions ", between);
  CHECK(rel <= 1e-5);
  CHECK(between <= 1e-6);
}

TEST_CASE("onebit with error feedback trains within 1 point of fp32, at H = 1 and H = 4") {
  // Plain SGD inside the region (see docs/training.md: with local momentum, onebit at H = 1 lags
  // by about 2 points on this model, because the mean-|x| scale under-sends the persistent large
  // coordinates that momentum produces; int8 and onebit at H >= 4 do not).
  const std::string common =
      "  batch_size: 32\n  lr: 0.2\n  lr_decay: cosine\n  optimizer: {momentum: 0}\n  eval_every: "
      "0\n  seed: 5\n";
  auto accuracy = [&](const std::string& codec, uint32_t h) {
    test::TempDir dir("codec-" + codec + std::to_string(h));
    Cluster c;
    c.regions = {"a", "b"};
    c.model = R"({arch: "784-64-10", critical: ["fc2.*"]})";
    c.worker_yaml =
        common +
        fmt::format(
            "  local_steps: {}\n  rounds: {}\n  critical_codec: {}\n  noncritical_codec: {}\n", h,
            800 / h, codec, codec);
    require_success(run_cluster(c, dir.path()));
    return final_accuracy(dir.path(), "a");
  };
  for (uint32_t h : {1u, 4u}) {
    const double fp32 = accuracy("fp32", h), onebit = accuracy("onebit", h);
    MESSAGE("H = ", h, ": fp32 ", fp32, ", onebit+EF ", onebit);
    CHECK(fp32 > 0.75);
    CHECK(onebit >= fp32 - 0.01);
  }
}

TEST_CASE(
    "with s = 2 a slowed region is never more than 2 rounds behind, and the other keeps going") {
  test::TempDir dir("stale");
  Cluster c;
  c.regions = {"fast", "slow"};
  c.server_extra = "  staleness_bound: 2\n";
  c.worker_yaml =
      "  batch_size: 16\n  local_steps: 2\n  rounds: 30\n  eval_every: 0\n  critical_codec: "
      "onebit\n"
      "  noncritical_codec: int8\n  step_delay_ms: {slow: 15}\n";
  require_success(run_cluster(c, dir.path()));
  uint32_t max_staleness = 0;
  for (const std::string r : {"fast", "slow"}) {
    const auto rounds = events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", r), "round");
    CHECK(rounds.size() == 30);
    for (const auto& e : rounds)
      max_staleness = std::max(max_staleness, e["staleness"].get<uint32_t>());
  }
  // The fast region finished its 30 rounds while the slow one was still behind: it ran ahead.
  // (Its `done` comes later: the flush at the end waits for the slow region's.)
  const auto fast_done =
      events(dir.path() / "worker-fast-0.metrics.jsonl", "round").back()["time"].get<double>();
  const auto slow_done =
      events(dir.path() / "worker-slow-0.metrics.jsonl", "round").back()["time"].get<double>();
  MESSAGE("max staleness ", max_staleness, "; fast's last round at ", fast_done, " s, slow's at ",
          slow_done, " s");
  CHECK(max_staleness <= 2);
  CHECK(max_staleness >= 1);  // the bound was used, not just respected by lockstep
}

TEST_CASE(
    "an emulated step time paces a region's steps from their start, and a step whose real work "
    "takes longer is counted as an overrun") {
  test::TempDir dir("emulated");
  Cluster c;
  c.regions = {"paced", "overrun"};
  // paced: 40 ms per step, far more than an MLP step takes here; overrun: a 30 ms delay inside
  // every step's work against an emulated 5 ms.
  c.worker_yaml =
      "  batch_size: 16\n  local_steps: 2\n  rounds: 4\n  eval_every: 0\n"
      "  step_time_ms: {paced: 40, overrun: 5}\n  step_delay_ms: {overrun: 30}\n";
  require_success(run_cluster(c, dir.path()));
  const auto steps_of = [&](const std::string& r) {
    return events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", r), "step");
  };
  const auto done_of = [&](const std::string& r) {
    return events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", r), "done").back();
  };
  const auto paced = steps_of("paced");
  REQUIRE(paced.size() == 8);
  for (const auto& e : paced) {
    CHECK_FALSE(e["overrun"].get<bool>());
    // The step lasts its emulated time: the wait counts as the emulated device's compute.
    CHECK(e["compute_s"].get<double>() + e["comm_s"].get<double>() +
              e["optimizer_s"].get<double>() >=
          0.040 - 1e-3);
  }
  CHECK(done_of("paced")["step_overruns"] == 0);
  for (const auto& e : steps_of("overrun")) CHECK(e["overrun"].get<bool>());
  CHECK(done_of("overrun")["step_overruns"] == 8);
  const auto start = events(dir.path() / "worker-paced-0.metrics.jsonl", "start").front();
  CHECK(start["step_time_ms"] == 40);
}

TEST_CASE(
    "time-budgeted rounds on an uneven fleet: a region at a third of the speed takes a third of "
    "the steps in the same rounds, every rank of it the leader's count, and both regions compute "
    "for the same time; each region trains on its own micro-batch") {
  test::TempDir dir("budget");
  Cluster c;
  c.regions = {"fast", "slow"};
  // One worker in fast, two in slow (workers_per_region: {fast: 1, slow: 2}): the slow region's
  // count reaches its other rank with the round's plan.
  c.workers_in = {{"fast", 1}, {"slow", 2}};
  // Budget auto: H = 6 steps of 60 ms; the slow region's 180 ms steps fit 2 a round. Streaming
  // fragments merged one step... H / P = 3 steps after their push: in the slow region's rounds
  // of 2 steps, a fragment is due again before its delay is over. Micro-batches per region: the
  // slow region's two workers at 8 each train on as many samples a step as the fast one at 16.
  c.worker_yaml =
      "  batch_size: {fast: 16, slow: 8}\n  local_steps: 6\n  rounds: 5\n  eval_every: 0\n  "
      "overlap: true\n"
      "  fragments: 2\n  step_time_ms: {fast: 60, slow: 180}\n  round_time_ms: auto\n"
      "  lr: 0.05\n  lr_decay: cosine\n  min_lr: 0.005\n";
  require_success(run_cluster(c, dir.path()));
  const auto log = [&](const std::string& region, uint32_t rank) {
    return dir.path() / fmt::format("worker-{}-{}.metrics.jsonl", region, rank);
  };
  double compute[2] = {0, 0};
  uint64_t totals[2] = {0, 0}, overruns = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string region = c.regions[i];
    const auto rounds = events(log(region, 0), "round");
    REQUIRE(rounds.size() >= 5);  // and the end's exchanges, with 0 steps
    std::vector<uint32_t> counts;
    for (size_t r = 0; r < 5; ++r) counts.push_back(rounds[r]["steps"].get<uint32_t>());
    for (auto k : counts) {
      CHECK(k >= 1);
      CHECK(k <= 12);  // max_local_steps: 2 x H
      totals[i] += k;
    }
    for (uint32_t rank = 0; rank < c.workers_of(region); ++rank) {  // its leader's counts
      const auto start = events(log(region, rank), "start").front();
      CHECK(start["batch_size"] == (i == 0 ? 16 : 8));
      CHECK(start["tokens_per_step"] == 16);  // the region's samples a step
      CHECK(events(log(region, rank), "step").size() == totals[i]);
      const auto done = events(log(region, rank), "done").back();
      CHECK(done["steps"] == totals[i]);
      overruns += done["step_overruns"].get<uint64_t>();
    }
    for (const auto& e : events(log(region, 0), "step")) compute[i] += e["compute_s"].get<double>();
    MESSAGE(region, "'s rounds: ", counts[0], " ", counts[1], " ", counts[2], " ", counts[3], " ",
            counts[4]);
  }
  MESSAGE("compute: fast ", compute[0], " s, slow ", compute[1], " s; overruns ", overruns);
  // 6 steps of 60 ms against 2 of 180 ms a round. The measured pace is the emulated one plus
  // each step's own overheads: a round may take a step less once the shortfall adds up to half a
  // step (round_budget.hpp). A loaded machine overruns the emulated times (each rank's done
  // counts them) and the pace follows the real one: only the ratio is then checked.
  if (overruns == 0) {
    CHECK(totals[0] + 1 >= 30);
    CHECK(totals[1] + 1 >= 10);
  }
  CHECK(totals[0] <= 30);
  CHECK(totals[1] <= 10);
  CHECK(double(totals[1]) / double(totals[0]) == doctest::Approx(1.0 / 3).epsilon(0.35));
  // Both 1.8 s of emulated compute (within the steps' own overheads); with fixed rounds the slow
  // region would compute for three times as long.
  CHECK(compute[1] / compute[0] == doctest::Approx(1.0).epsilon(0.25));
  // The learning-rate schedule (cosine over 5 x 6 steps) follows the rounds: each round's first
  // step has the same learning rate in both regions, whatever their counts.
  const auto first_lrs = [&](const std::string& region) {
    std::map<uint64_t, double> out;
    for (const auto& e : events(log(region, 0), "step"))
      out.try_emplace(e["round"].get<uint64_t>(), e["lr"].get<double>());
    return out;
  };
  const auto fast_lr = first_lrs("fast"), slow_lr = first_lrs("slow");
  REQUIRE(fast_lr.size() == 5);
  REQUIRE(slow_lr.size() == 5);
  for (const auto& [round, lr] : fast_lr) CHECK(slow_lr.at(round) == doctest::Approx(lr));
  CHECK(fast_lr.at(5) < fast_lr.at(1));  // the schedule did decay
}

TEST_CASE("bad worker configurations fail at start-up with a clear message") {
  const auto start_alone = [](const std::string& worker_yaml,
                              const std::string& model = R"({arch: "784-32-10"})") {
    return start_worker_alone(worker_yaml, model);
  };
  CHECK(start_alone("  critical_codec: onebyte\n")
            .find("worker.critical_codec: codec spec 'onebyte': unknown codec") !=
        std::string::npos);
  CHECK(start_alone("  data: {kind: fashion-mnist, path: /nonexistent}\n")
            .find("/nonexistent/train-images-idx3-ubyte.gz") != std::string::npos);
  CHECK(start_alone("  batch_sise: 3\n").find("unknown key 'worker.batch_sise'") !=
        std::string::npos);
  CHECK(start_alone("", R"({arch: "784-0-10"})").find("model.arch") != std::string::npos);
}

TEST_CASE("a worker whose model differs from the servers' is refused by table hash") {
  test::TempDir dir("mismatch");
  const int port = test::free_port();
  const auto server_cfg = dir.path() / "server.yaml", worker_cfg = dir.path() / "worker.yaml";
  const std::string head = fmt::format(
      "regions: [a]\nserver: {{endpoints: {{a: \"tcp://127.0.0.1:{}\"}}, run_dir: \"{}\"}}\n", port,
      dir.path().string());
  std::ofstream(server_cfg) << head << "model: {arch: \"784-32-10\"}\n";
  std::ofstream(worker_cfg) << head << "model: {arch: \"784-64-10\"}\nworker: {run_dir: \""
                            << dir.path().string() << "\", data_dir: \"" << kData << "\"}\n";
  test::Process server({"server", "--config", server_cfg.string(), "--region", "a"},
                       dir.path() / "s.log");
  test::Process w({"worker", "--config", worker_cfg.string(), "--region", "a"},
                  dir.path() / "w.log");
  const auto code = w.wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code != 0);
  CHECK(w.log().find("badTableHash") != std::string::npos);
  server.terminate();
  CHECK(server.wait(20s).value_or(-1) == 0);
}

TEST_CASE(
    "workers whose config says another fragment count follow the servers': every rank of the "
    "region takes the leader's schedule") {
  test::TempDir dir("layout");
  Cluster c;
  c.regions = {"a", "b"};
  c.workers = 2;
  c.model = R"({arch: "784-32-10", critical: ["*"]})";
  // The servers read P = 2 from the file; the workers are told P = 1.
  c.worker_yaml =
      "  batch_size: 16\n  local_steps: 2\n  rounds: 3\n  lr: 0.05\n  fragments: 2\n"
      "  eval_every: 0\n  seed: 3\n";
  c.worker_args = {"--set", "worker.fragments=1"};
  require_success(run_cluster(c, dir.path()));
  for (const char* region : {"a", "b"}) {
    const auto start =
        events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", region), "start");
    const auto connect =
        events(dir.path() / fmt::format("worker-{}-0.metrics.jsonl", region), "connect");
    REQUIRE(start.size() == 1);
    REQUIRE(connect.size() == 1);
    CHECK(start[0]["fragments"] == 1);    // the config
    CHECK(connect[0]["fragments"] == 2);  // the servers'
  }
  // The leader logged where its config and the servers differ.
  std::ifstream log(dir.path() / "worker-a-0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(text.find("the servers cut 2 fragment(s), this worker's config 1 fragment(s): following "
                  "the servers") != std::string::npos);
  // Both regions end on the global model (the flush), the ranks of each in step with their leader.
  CHECK(read_params(dir.path() / "params-a.f32") == read_params(dir.path() / "params-b.f32"));
}
