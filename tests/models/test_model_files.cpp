// The files geotrain hands to a reference implementation: safetensors (parameters) and int32
// .npy (token batches), their readers' refusals of bad files, and the commands that write them
// (`export-init`, `dump-batches`) checked against the in-process code they must match; and the
// `bench train` JSON contract.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "models/mlp.hpp"
#include "models/npy.hpp"
#include "models/safetensors.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/data/text_corpus.hpp"

namespace {

using geotrain::InputError;
using geotrain::test::run_binary;
using geotrain::test::TempDir;
namespace models = geotrain::models;

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A safetensors file from a header text and `data_bytes` zero bytes of data.
std::string safetensors_bytes(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

// The InputError message of read_safetensors on `bytes`, or "" when it does not throw.
std::string read_error(const TempDir& dir, const std::string& bytes) {
  const auto p = dir.path() / "bad.safetensors";
  write_file(p, bytes);
  try {
    models::read_safetensors(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors round trip: names, shapes, values, order and metadata come back") {
  TempDir dir("safetensors");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, -6.5f};
  const std::vector<float> b = {7.0f};
  const auto p = dir.path() / "t.safetensors";
  // "z" before "a": the file must keep the written order, not the alphabetical one.
  models::write_safetensors(p, {{"z.w", {2, 3}, a}, {"a.b", {1}, b}}, {{"vocab", "256"}});

  const auto f = models::read_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].name == "z.w");
  CHECK(f.tensors[0].shape == std::vector<uint64_t>{2, 3});
  CHECK(f.tensors[0].values == a);
  CHECK(f.tensors[1].name == "a.b");
  CHECK(f.tensors[1].values == b);
  CHECK(f.metadata.at("vocab") == "256");
  CHECK(f.find("a.b") == &f.tensors[1]);
  CHECK(f.find("nope") == nullptr);

  // The header is padded so that the data starts 8-byte aligned.
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  CHECK(n % 8 == 0);
  CHECK(std::filesystem::file_size(p) == 8 + n + 4 * (a.size() + b.size()));
}

TEST_CASE("the safetensors reader refuses bad files with an error naming the file and the fault") {
  TempDir dir("safetensors-bad");
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  SUBCASE("a file shorter than the header length") {
    const auto e = read_error(dir, "abc");
    CHECK(contains(e, "bad.safetensors"));
    CHECK(contains(e, "truncated"));
  }
  SUBCASE("a header length past the end of the file") {
    std::string bytes = safetensors_bytes("{" + ok_entry + "}", 8);
    const uint64_t huge = 1 << 20;
    std::memcpy(bytes.data(), &huge, 8);
    const auto e = read_error(dir, bytes);
    CHECK(contains(e, "bad.safetensors"));
    CHECK(contains(e, "truncated"));
  }
  SUBCASE("a header that is not JSON") {
    const auto e = read_error(dir, safetensors_bytes("{\"w\": [1, 2", 8));
    CHECK(contains(e, "bad.safetensors"));
    CHECK(contains(e, "not valid JSON"));
  }
  SUBCASE("a header that is JSON but not an object") {
    CHECK(contains(read_error(dir, safetensors_bytes("[1, 2]", 0)), "must be a JSON object"));
  }
  SUBCASE("data offsets beyond the data") {
    const auto e = read_error(
        dir, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
    CHECK(contains(e, "bad.safetensors"));
    CHECK(contains(e, "'w'"));
    CHECK(contains(e, "out of range"));
  }
  SUBCASE("data offsets that do not match the shape") {
    const auto e = read_error(
        dir, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
    CHECK(contains(e, "shape [3]"));
  }
  SUBCASE("a shape whose element count overflows is not taken for a small one") {
    const auto e = read_error(
        dir,
        safetensors_bytes(
            R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", 8));
    CHECK(contains(e, "'w'"));
  }
  SUBCASE("a dtype other than F32") {
    const auto e = read_error(
        dir, safetensors_bytes(R"({"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", 8));
    CHECK(contains(e, "bad.safetensors"));
    CHECK(contains(e, "F16"));
    CHECK(contains(e, "only F32"));
  }
  SUBCASE("a tensor entry without data_offsets") {
    CHECK(contains(read_error(dir, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", 8)),
                   "needs dtype, shape and data_offsets"));
  }
  SUBCASE("metadata that is not a string") {
    CHECK(contains(
        read_error(dir, safetensors_bytes("{" + ok_entry + R"(,"__metadata__":{"vocab":256}})", 8)),
        "__metadata__.vocab"));
  }
  SUBCASE("a file that does not exist") {
    CHECK_THROWS_WITH_AS(models::read_safetensors(dir.path() / "missing.safetensors"),
                         doctest::Contains("missing.safetensors"), InputError);
  }
}

TEST_CASE("npy round trip, and a float array is refused as int32") {
  TempDir dir("npy");
  std::vector<int32_t> v(2 * 3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 7) - 40;
  const auto p = dir.path() / "b.npy";
  models::write_npy_int32(p, {2, 3, 5}, v);
  const auto back = models::read_npy_int32(p);
  CHECK(back.shape == std::vector<uint64_t>{2, 3, 5});
  CHECK(back.values == v);
  CHECK((std::filesystem::file_size(p) - 4 * v.size()) % 64 == 0);  // data 64-byte aligned

  std::string f32 = "\x93NUMPY\x01";
  f32 += '\0';
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n";
  const auto n = static_cast<uint16_t>(header.size());
  f32.append(reinterpret_cast<const char*>(&n), 2);
  write_file(dir.path() / "f.npy", f32 + header + std::string(4, '\0'));
  CHECK_THROWS_WITH_AS(models::read_npy_int32(dir.path() / "f.npy"), doctest::Contains("not int32"),
                       InputError);
}

TEST_CASE("export-init writes the MLP's initial parameters, shaped (out, in), with its config") {
  TempDir dir("export-init");
  write_file(dir.path() / "c.yaml",
             "regions: [a]\nmodel: {arch: \"12-8-3\"}\nworker: {seed: 77}\n");
  const auto out = dir.path() / "init.safetensors";
  const auto r = run_binary("--log-level warn export-init --config " +
                            (dir.path() / "c.yaml").string() + " --out " + out.string());
  INFO(r.text);
  REQUIRE(r.code == 0);

  const models::Mlp mlp(models::parse_mlp_config("12-8-3"));
  std::vector<float> expected(mlp.parameter_count());
  mlp.init(expected, 77);
  const auto f = models::read_safetensors(out);
  CHECK(f.metadata.at("model") == "mlp");
  CHECK(f.metadata.at("arch") == "12-8-3");
  CHECK(f.metadata.at("seed") == "77");
  const auto specs = mlp.tensor_specs();
  REQUIRE(f.tensors.size() == specs.size());
  CHECK(f.tensors[0].shape == std::vector<uint64_t>{8, 12});
  CHECK(f.tensors[1].shape == std::vector<uint64_t>{8});
  size_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    CHECK(f.tensors[i].name == specs[i].name);
    const std::vector<float> want(
        expected.begin() + static_cast<ptrdiff_t>(offset),
        expected.begin() + static_cast<ptrdiff_t>(offset + specs[i].size));
    CHECK(f.tensors[i].values == want);
    offset += specs[i].size;
  }
}

TEST_CASE("dump-batches refuses a config that does not train on text") {
  TempDir dir("dump-mlp");
  write_file(dir.path() / "c.yaml", "regions: [a]\nmodel: {arch: \"12-8-3\"}\n");
  const auto r = run_binary("dump-batches --config " + (dir.path() / "c.yaml").string() +
                            " --steps 2 --out " + (dir.path() / "b.npy").string());
  CHECK(r.code == 2);
  CHECK(contains(r.text, "dump-batches is for text data"));
  CHECK(!std::filesystem::exists(dir.path() / "b.npy"));
}

TEST_CASE("dump-batches writes the windows of the trainer's global rank: region b, rank 1 of 2x2") {
  TempDir dir("dump-text");
  std::string text;
  for (int i = 0; text.size() < 20000; ++i)
    text += "line " + std::to_string(i * 7919 % 1000) + "\n";
  write_file(dir.path() / "corpus.txt", text);
  const auto config = dir.path() / "c.yaml";
  write_file(config,
             "regions: [a, b]\nmodel: {kind: gpt, vocab: 256, d_model: 16, layers: 1, "
             "heads: 2, seq_len: 16}\nworker: {workers_per_region: 2, batch_size: 3, "
             "seed: 5, data: {kind: text, path: " +
                 (dir.path() / "corpus.txt").string() + "}}\n");
  const auto out = dir.path() / "b.npy";
  const auto r = run_binary("--log-level warn dump-batches --config " + config.string() +
                            " --region b --rank 1 --steps 4 --out " + out.string());
  INFO(r.text);
  REQUIRE(r.code == 0);

  const auto got = models::read_npy_int32(out);
  REQUIRE(got.shape == std::vector<uint64_t>{4, 3, 17});
  const auto corpus = geotrain::worker::load_text_corpus(dir.path() / "corpus.txt");
  // world = 2 regions x 2 workers; region b (index 1), rank 1 -> global rank 1 * 2 + 1 = 3.
  const geotrain::worker::TextWindows windows(corpus, 17, 3, 5, 4, 3);
  std::vector<int32_t> want;
  for (uint64_t j = 0; j < 4; ++j) {
    const auto b = windows.batch(j);
    want.insert(want.end(), b.tokens.begin(), b.tokens.end());
  }
  CHECK(got.values == want);
}

TEST_CASE("geotrain bench train --json reports the rate, the split and the FLOPs formula") {
  const auto r = run_binary(
      "--log-level warn bench train --model 64-32-10 --batch 16 --steps 3 "
      "--warmup-steps 1 --json");
  INFO(r.text);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.text);
  CHECK(doc["kind"] == "mlp");
  CHECK(doc["parameters"] == 64 * 32 + 32 + 32 * 10 + 10);
  CHECK(doc["flops_per_token"].get<double>() == 6.0 * (64 * 32 + 32 + 32 * 10 + 10));
  for (const char* key : {"tokens_per_s", "step_ms", "forward_backward_ms", "gflops"})
    CHECK(doc[key].get<double>() > 0);
  CHECK(doc["optimizer_ms"].get<double>() > 0);  // an SGD step over 2,410 parameters
  CHECK(doc["flops_formula"].is_string());
  CHECK(doc["device_kind"] == "cpu");
  CHECK(doc["precision"] == "fp32");
  CHECK(doc["mfu"].get<double>() == 0.0);  // no stated peak for a CPU
  CHECK(doc["peak_tflops"].get<double>() == 0.0);

  const auto bad = run_binary("bench train --model not-a-model --steps 1");
  CHECK(bad.code == 2);
  CHECK(contains(bad.text, "neither a GPT preset"));
  const auto bf16_cpu = run_binary("bench train --model gpt-tiny --precision bf16 --steps 1");
  CHECK(bf16_cpu.code == 2);
  CHECK(contains(bf16_cpu.text, "--precision bf16 needs --device cuda"));
}

TEST_CASE(
    "geotrain bench zero --json reports each stage's optimizer state and rate against "
    "stage 0's") {
  const auto r = run_binary(
      "--log-level warn bench zero --model 64-32-10 --batch 8 --workers 2,3 --steps 2 "
      "--warmup-steps 0 --turns 1 --json");
  INFO(r.text);
  REQUIRE(r.code == 0);
  // The progress lines go to stderr, after the document in this capture or before it.
  const auto doc = nlohmann::json::parse(
      r.text.substr(r.text.find('{'), r.text.rfind('}') - r.text.find('{') + 1));
  const uint64_t n = 64 * 32 + 32 + 32 * 10 + 10;  // 2,410: 1,205 per worker of two
  REQUIRE(doc["rows"].size() == 6);
  for (const auto& row : doc["rows"]) {
    const uint32_t k = row["workers"], stage = row["stage"];
    CAPTURE(k);
    CAPTURE(stage);
    CHECK(row["parameters"] == n);
    // AdamW's two moments, whole at stage 0, the most loaded worker's range otherwise.
    const uint64_t held = stage == 0 ? n : (n + k - 1) / k;
    CHECK(row["optimizer_state_bytes"] == 2 * held * sizeof(float));
    CHECK(row["tokens_per_s"].get<double>() > 0);
    CHECK(row["speed_ratio"].get<double>() > 0);
  }
  const auto bad = run_binary("bench zero --workers 1 --steps 1");
  CHECK(bad.code == 2);
  CHECK(contains(bad.text, "--workers 1 is not in [2, 64]"));
}
