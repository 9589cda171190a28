// The language model across regions, as a user runs it: real `geotrain server` and
// `geotrain worker` processes training the GPT on the KJV corpus (scripts/bootstrap.sh writes
// it). Exactness against one process on the same byte windows, and training with 1-bit
// compression and error feedback in both directions.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "cluster.hpp"
#include "models/gpt.hpp"
#include "temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/data/text_corpus.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

const std::filesystem::path kCorpus = worker::DataConfig::kKjvFile;

void require_corpus() {
  REQUIRE_MESSAGE(std::filesystem::exists(kCorpus), "the KJV corpus ", kCorpus.string(),
                  " is missing: run scripts/bootstrap.sh");
}

Cluster gpt_cluster(uint32_t regions, uint32_t workers, const std::string& critical) {
  Cluster c;
  for (uint32_t r = 0; r < regions; ++r) c.regions.push_back(std::string(1, char('a' + r)));
  c.workers = workers;
  c.model = fmt::format("{{kind: gpt, preset: gpt-tiny, critical: {}}}", critical);
  c.data = fmt::format("  data: {{kind: text, path: \"{}\"}}\n", kCorpus.string());
  return c;
}

}  // namespace

TEST_CASE(
    "gpt-tiny on 2 regions x 2 workers with fp32, H=1 and synchronous rounds equals one process "
    "on the same byte windows") {
  require_corpus();
  test::TempDir dir("lm-exact");
  const uint32_t regions = 2, workers = 2, steps = 12, batch = 2, seed = 11;
  const float lr = 0.1f;
  // Every tensor critical: synchronous rounds. Plain SGD, so that the mean of the regions'
  // deltas is exactly one step on the mean gradient of all four workers.
  Cluster c = gpt_cluster(regions, workers, R"(["*"])");
  c.worker_yaml = fmt::format(
      "  batch_size: {}\n  local_steps: 1\n  rounds: {}\n  lr: {}\n  optimizer: {{kind: sgd, "
      "momentum: 0}}\n  eval_every: 0\n  seed: {}\n  anomaly_guard: {{enabled: false}}\n",
      batch, steps, lr, seed);
  require_success(run_cluster(c, dir.path(), 300s));
  const auto a = read_params(dir.path() / "params-a.f32");
  const auto b = read_params(dir.path() / "params-b.f32");

  // The reference: one process, every worker's windows of each step, one SGD step on their mean.
  models::Gpt model(models::gpt_preset("gpt-tiny"));
  std::vector<float> p(model.parameter_count()), g(p.size()), sum(p.size());
  model.init(p, seed);
  const auto corpus = worker::load_text_corpus(kCorpus);
  const uint32_t world = regions * workers;
  std::vector<worker::TextWindows> ranks;
  for (uint32_t r = 0; r < world; ++r)
    ranks.emplace_back(corpus, model.config().seq_len + 1, batch, seed, world, r);
  for (uint32_t s = 0; s < steps; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (const auto& windows : ranks) {
      const worker::Batch bt = windows.batch(s);
      std::fill(g.begin(), g.end(), 0.0f);
      model.forward_backward(p, models::BatchView{bt.size, nullptr, nullptr, bt.tokens.data()}, g);
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * (sum[i] / float(world));
  }
  REQUIRE(a.size() == p.size());
  REQUIRE(b.size() == p.size());
  double diff = 0, norm = 0, between = 0, moved = 0;
  std::vector<float> p0(p.size());
  model.init(p0, seed);
  for (size_t i = 0; i < p.size(); ++i) {
    diff += double(a[i] - p[i]) * double(a[i] - p[i]);
    norm += double(p[i]) * double(p[i]);
    between += double(a[i] - b[i]) * double(a[i] - b[i]);
    moved += double(p[i] - p0[i]) * double(p[i] - p0[i]);
  }
  const double rel = std::sqrt(diff / norm), rel_between = std::sqrt(between / norm);
  MESSAGE("relative error ", rel, ", between regions ", rel_between,
          ", training moved the "
          "parameters by ",
          std::sqrt(moved / norm), " (relative)");
  CHECK(std::sqrt(moved / norm) > 1e-3);  // the comparison is about a run that trained
  CHECK(rel <= 1e-5);
  CHECK(rel_between <= 1e-6);
}

TEST_CASE("gpt-tiny trains across 2 regions with onebit and error feedback both ways: bpb falls") {
  require_corpus();
  test::TempDir dir("lm-onebit");
  Cluster c = gpt_cluster(2, 1, R"(["ln_f.*"])");
  c.worker_yaml =
      "  batch_size: 4\n  local_steps: 8\n  rounds: 8\n  critical_codec: onebit\n"
      "  noncritical_codec: onebit\n  optimizer: {kind: adamw, weight_decay: 0.1}\n  lr: 0.003\n"
      "  warmup_steps: 8\n  lr_decay: cosine\n  max_grad_norm: 1.0\n  eval_every: 4\n  seed: 2\n"
      "  data: {kind: text, path: \"" +
      kCorpus.string() + "\", eval_windows: 16}\n";
  c.data.clear();
  require_success(run_cluster(c, dir.path(), 300s));
  std::optional<double> global;  // the global model's bpb, the same in both regions
  for (const std::string r : {"a", "b"}) {
    const auto file = dir.path() / fmt::format("worker-{}-0.metrics.jsonl", r);
    const auto evals = events(file, "eval");
    REQUIRE(evals.size() >= 2);
    const double first = evals.front()["val_bpb"].get<double>();
    const double last = evals.back()["val_bpb"].get<double>();
    const auto done = events(file, "done");
    REQUIRE(done.size() == 1);
    // The last eval is of the region's own parameters; final_* are the global model's.
    CHECK(done[0]["region_val_bpb"].get<double>() == doctest::Approx(last));
    CHECK(done[0]["global_model"] == true);
    REQUIRE(done[0]["final_val_bpb"].is_number());
    if (global) CHECK(done[0]["final_val_bpb"].get<double>() == *global);
    global = done[0]["final_val_bpb"].get<double>();
    CHECK(done[0].contains("final_val_loss"));
    CHECK_FALSE(done[0].contains("final_test_accuracy"));
    const auto rounds = events(file, "round");
    double pushed = 0;
    for (const auto& e : rounds) pushed += e.value("bytes_pushed", 0.0);
    MESSAGE("region ", r, ": val bpb ", first, " after round 4 -> ", last, " at the end; ",
            pushed / 1e6, " MB pushed");
    // A uniform guess over bytes is 8 bits per byte; English text's byte unigram entropy ~4.5.
    CHECK(last < 5.5);
    CHECK(last < first);
    // onebit: about 1 bit per parameter per push (plus scales), far below fp32's 32 bits.
    const double fp32_bytes =
        8.0 * double(models::gpt_parameter_count(models::gpt_preset("gpt-tiny"))) * 4;
    CHECK(pushed < fp32_bytes / 16);
  }
}

TEST_CASE("a language model on a missing corpus, or a classifier on text, fails with the name") {
  const auto start_alone = [](const std::string& model, const std::string& worker_yaml) {
    return start_worker_alone(worker_yaml, model);
  };
  const std::string gpt = "{kind: gpt, preset: gpt-tiny}";
  const auto missing = start_alone(gpt, "  data: {kind: text, path: /nonexistent/corpus.txt}\n");
  CHECK_MESSAGE(missing.find("/nonexistent/corpus.txt") != std::string::npos, missing);
  const auto mismatch = start_alone(R"({arch: "784-32-10"})", "  data: {kind: text}\n");
  CHECK_MESSAGE(mismatch.find("worker.data.kind text") != std::string::npos, mismatch);
  const auto preset = start_alone("{kind: gpt, preset: gpt-huge}", "");
  CHECK_MESSAGE(preset.find("gpt-huge") != std::string::npos, preset);
  CHECK_MESSAGE(preset.find("gpt-tiny") != std::string::npos, preset);
}
