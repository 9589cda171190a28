// worker.device on a build or machine without a GPU: `device: cuda` is refused when the Trainer
// is built (before any data is read or any connection made), with a message that names the key
// and what is missing. Runs on CPU-only machines (label worker, not gpu).
#include <doctest/doctest.h>

#include <string>

#include "core/error.hpp"
#include "wire/context.hpp"
#include "worker/backend/backend_factory.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/config.hpp"
#include "worker/run/trainer.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

WorkerConfig config_on(const std::string& device) {
  return parse_worker_config(
      "regions: [a]\nmodel: {arch: \"784-32-10\"}\n"
      "server: {endpoints: {a: \"tcp://127.0.0.1:1\"}}\n"
      "worker: {device: " +
      device + ", run_dir: /nonexistent}\n");
}

// The reason the refusal gives, or empty when this build and machine can train on CUDA.
std::string cuda_refusal() {
  try {
    require_device_available("cuda");
    return {};
  } catch (const InputError& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE(
    "device: cuda is refused at start-up with a clear message when the build or machine has no "
    "GPU") {
  const std::string why = cuda_refusal();
  if (why.empty()) {
    MESSAGE(
        "this build and machine have a CUDA device: nothing to refuse here (the gpu suites cover "
        "it)");
    return;
  }
  MESSAGE("refused: " << why);
  CHECK(why.find("worker.device is 'cuda'") != std::string::npos);
  CHECK(why.find("use device: cpu") != std::string::npos);
#ifdef GEOTRAIN_TEST_BUILD_HAS_CUDA
  CHECK(why.find("no usable CUDA device") != std::string::npos);
#else
  CHECK(why.find("built without CUDA") != std::string::npos);
#endif

  wire::Context context;
  CHECK_THROWS_WITH_AS(Trainer(config_on("cuda"), "a", 0, context),
                       doctest::Contains("worker.device is 'cuda'"), InputError);
}

TEST_CASE(
    "device: cpu is accepted everywhere, and an unknown device is refused by the config parser") {
  CHECK_NOTHROW(require_device_available("cpu"));
  wire::Context context;
  CHECK_NOTHROW(Trainer(config_on("cpu"), "a", 0, context));
  CHECK_THROWS_WITH_AS(config_on("tpu"), doctest::Contains("worker.device"), InputError);
  CHECK_THROWS_WITH_AS(require_device_available("tpu"),
                       doctest::Contains("allowed values are cpu and cuda"), InputError);
}

TEST_CASE(
    "worker.device per region: a mixed fleet's CPU regions train on the CPU, in fp32, and re-form; "
    "its GPU regions are NCCL groups that restart, and are refused here without a GPU") {
  const auto parse = [](const std::string& worker) {
    return parse_worker_config(
        "regions: [a, b]\nmodel: {kind: gpt, preset: gpt-tiny}\n"
        "server: {endpoints: {a: \"tcp://127.0.0.1:1\", b: \"tcp://127.0.0.1:2\"}}\n"
        "worker: {data: {kind: text, path: /x}, run_dir: /nonexistent, " +
            worker + "}\n",
        "w.yaml");
  };
  const auto c = parse("device: {a: cpu, b: cuda}, precision: bf16");
  CHECK(c.device_in("a") == "cpu");
  CHECK(c.device_in("b") == "cuda");
  CHECK(c.devices.text() == "{a: cpu, b: cuda}");
  CHECK(c.precision_in("a") == "fp32");  // bf16 is the GPU regions'
  CHECK(c.precision_in("b") == "bf16");
  CHECK(c.elastic_in("a"));
  CHECK_FALSE(c.elastic_in("b"));
  // Written per region but alike: one device.
  CHECK_FALSE(parse("device: {a: cuda, b: cuda}").devices.uneven());
  CHECK(parse("device: cuda").device_in("a") == "cuda");
  CHECK_THROWS_WITH_AS(parse("device: {a: cpu}"),
                       doctest::Contains("worker.device has no value for region 'b'"), InputError);
  CHECK_THROWS_WITH_AS(parse("device: {a: cpu, b: tpu}"),
                       doctest::Contains("worker.device.b is 'tpu'"), InputError);
  CHECK_THROWS_WITH_AS(parse("device: {a: cpu, c: cuda, b: cpu}"),
                       doctest::Contains("worker.device"), InputError);
  // What runs on the CPU only is refused when any region is a GPU's.
  CHECK_THROWS_WITH_AS(parse("device: {a: cpu, b: cuda}, optimizer: {kind: muon}"),
                       doctest::Contains("muon runs on the CPU only (worker.device is {a: cpu, "
                                         "b: cuda}"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("device: {a: cpu, b: cuda}, zero_stage: 1, elastic: false"),
                       doctest::Contains("on the CPU only"), InputError);
  // Region a's worker is built here; region b's is refused as device: cuda is, when this build
  // or machine has no GPU.
  wire::Context context;
  CHECK_NOTHROW(Trainer(c, "a", 0, context));
  if (!cuda_refusal().empty())
    CHECK_THROWS_WITH_AS(Trainer(c, "b", 0, context), doctest::Contains("worker.device is 'cuda'"),
                         InputError);
}

// Regressions (fuzz/corpus/worker_config/crash-*): `worker: <scalar>` reached worker["data"] and
// escaped as YAML::BadSubscript; a complex key escaped as YAML::TypedBadConversion.
TEST_CASE(
    "a worker section that is not a mapping, or a key that is not a name, gets an InputError") {
  const std::string head = "regions: [a]\nmodel: {arch: \"784-32-10\"}\n";
  CHECK_THROWS_WITH_AS(parse_worker_config(head + "worker: 3\n", "w.yaml"),
                       doctest::Contains("'worker' must be a mapping"), InputError);
  CHECK_THROWS_WITH_AS(parse_worker_config("? [a, b]\n: 1\n" + head, "w.yaml"),
                       doctest::Contains("not a plain name"), InputError);
}

TEST_CASE("worker.precision: bf16 needs cuda and a GPT, and other values are refused by name") {
  const std::string gpt =
      "regions: [a]\nmodel: {kind: gpt, preset: gpt-tiny}\n"
      "server: {endpoints: {a: \"tcp://127.0.0.1:1\"}}\n";
  const auto parse = [&](const std::string& head, const std::string& worker) {
    return parse_worker_config(head + "worker: {" + worker + "}\n", "w.yaml");
  };
  CHECK(parse(gpt, "data: {kind: text, path: /x}").precision == "fp32");
  CHECK_THROWS_WITH_AS(parse(gpt, "data: {kind: text, path: /x}, precision: bf16"),
                       doctest::Contains("worker.precision bf16 needs worker.device cuda"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse(gpt, "data: {kind: text, path: /x}, precision: fp8"),
                       doctest::Contains("worker.precision"), InputError);
  const std::string mlp =
      "regions: [a]\nmodel: {arch: \"784-32-10\"}\nserver: {endpoints: {a: "
      "\"tcp://127.0.0.1:1\"}}\n";
  CHECK_THROWS_WITH_AS(parse(mlp, "device: cuda, precision: bf16"),
                       doctest::Contains("bf16 is for model.kind gpt"), InputError);
  CHECK(parse(gpt, "data: {kind: text, path: /x}, device: cuda, precision: bf16").precision ==
        "bf16");
  models::ModelSpec spec;
  spec.kind = "gpt";
  spec.gpt = models::gpt_preset("gpt-tiny");
  CHECK_THROWS_WITH_AS(make_model_backend("cpu", spec, 0, "bf16"),
                       doctest::Contains("worker.precision bf16 needs device: cuda"), InputError);
  // The CPU backend trains host-driven: there is no device-resident state to hand out.
  CHECK(make_model_backend("cpu", spec, 0)->resident() == nullptr);
}

TEST_CASE(
    "worker.error_feedback.decay parses, defaults to 1, and refuses 0 and 1.5; codec schedules "
    "parse for both classes; chunk_align is segment or tensor") {
  const auto parse = [](const std::string& worker) {
    return parse_worker_config(
        "regions: [a]\nmodel: {arch: \"784-32-10\"}\nworker: {" + worker + "}\n", "w.yaml");
  };
  CHECK(parse("critical_codec: onebit").error_feedback_decay == 1.0f);
  CHECK(parse("error_feedback: {decay: 0.9}").error_feedback_decay == 0.9f);
  CHECK(parse("error_feedback: {decay: 1}").error_feedback_decay == 1.0f);
  CHECK_THROWS_WITH_AS(
      parse("error_feedback: {decay: 0}"),
      doctest::Contains("w.yaml: worker.error_feedback.decay is 0, allowed: (0, 1]"), InputError);
  CHECK_THROWS_WITH_AS(parse("error_feedback: {decay: 1.5}"),
                       doctest::Contains("worker.error_feedback.decay is 1.5"), InputError);
  CHECK_THROWS_WITH_AS(parse("error_feedback: {decay: half}"),
                       doctest::Contains("worker.error_feedback.decay is 'half'"), InputError);
  CHECK_THROWS_WITH_AS(parse("error_feedback: 0.9"),
                       doctest::Contains("'worker.error_feedback' must be a mapping"), InputError);
  // Codec schedules (compression/codec_schedule.hpp) parse here too, for both classes.
  const auto scheduled = parse(
      "critical_codec: [{until_round: 10, codec: int8}, {codec: onebit}], noncritical_codec: int8");
  CHECK(scheduled.critical_codec.codec_at(10) == "int8");
  CHECK(scheduled.critical_codec.codec_at(11) == "onebit");
  CHECK(scheduled.critical_codec.text() == "int8 until round 10, then onebit");
  CHECK(scheduled.noncritical_codec == compression::CodecSchedule("int8"));
  CHECK_THROWS_WITH_AS(
      parse("noncritical_codec: [{until_round: 5, codec: int8}, {until_round: 5, codec: onebit}, "
            "{codec: fp32}]"),
      doctest::Contains("w.yaml: worker.noncritical_codec[1].until_round is 5, not after"),
      InputError);
  // worker.chunk_align: segment (default) | tensor.
  CHECK_FALSE(parse("critical_codec: onebit").tensor_segments);
  CHECK(parse("chunk_align: tensor").tensor_segments);
  CHECK_FALSE(parse("chunk_align: segment").tensor_segments);
  CHECK_THROWS_WITH_AS(parse("chunk_align: layer"),
                       doctest::Contains("w.yaml: worker.chunk_align is 'layer', allowed: segment, "
                                         "tensor"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse("critical_codec: \"onebit:scale=max\""),
                       doctest::Contains("worker.critical_codec: codec spec 'onebit:scale=max': "
                                         "scale=max is invalid for onebit (allowed: mean, rms)"),
                       InputError);
}
