#include "models/model_spec.hpp"

#include <fmt/format.h>

#include "core/deployment_keys.hpp"

namespace geotrain::models {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

}  // namespace

ModelSpec parse_model_spec(const YAML::Node& model, const YamlReader& in) {
  const std::string& source = in.source();
  GT_REQUIRE(model, "{}: key 'model' is missing (e.g. model: {{kind: gpt, preset: gpt-tiny}})",
             source);
  in.check_keys(model, "model", model_keys());
  ModelSpec spec;
  if (auto n = model["kind"]) spec.kind = in.choice(n, "model.kind", {"mlp", "gpt"});
  if (auto n = model["critical"]) spec.critical = in.strings(n, "model.critical");
  if (auto t = model["tensors"]) spec.tensors = read_model_tensors(in, t);
  const char* gpt_keys[] = {"preset", "vocab",   "d_model",  "layers",
                            "heads",  "seq_len", "mlp_ratio"};
  if (spec.kind == "mlp") {
    for (const char* k : gpt_keys)
      GT_REQUIRE(!model[k], "{}: model.{} is a GPT key, but model.kind is mlp (set kind: gpt)",
                 source, k);
    if (auto n = model["arch"]) {
      spec.arch = in.string(n, "model.arch");
      try {
        parse_mlp_config(spec.arch);
      } catch (const InputError& e) {
        GT_REQUIRE(false, "{}: model.arch: {}", source, e.what());
      }
    } else {
      GT_REQUIRE(!spec.tensors.empty(),
                 "{}: model.arch is missing: an MLP needs its architecture (e.g. "
                 "\"784-256-128-10\")",
                 source);
    }
    return spec;
  }
  GT_REQUIRE(!model["arch"],
             "{}: model.arch is an MLP key; a GPT is set by model.preset ({}) and "
             "vocab, d_model, layers, heads, seq_len, mlp_ratio",
             source, join(gpt_preset_names()));
  if (auto n = model["preset"]) {
    spec.preset = in.string(n, "model.preset");
    try {
      spec.gpt = gpt_preset(spec.preset);
    } catch (const InputError& e) {
      GT_REQUIRE(false, "{}: model.preset: {}", source, e.what());
    }
  }
  for (auto [key, field, hi] : {std::tuple{"vocab", &spec.gpt.vocab, size_t{1} << 24},
                                {"d_model", &spec.gpt.d_model, size_t{1} << 16},
                                {"layers", &spec.gpt.layers, size_t{1024}},
                                {"heads", &spec.gpt.heads, size_t{1024}},
                                {"seq_len", &spec.gpt.seq_len, size_t{1} << 20},
                                {"mlp_ratio", &spec.gpt.mlp_ratio, size_t{64}}})
    if (auto n = model[key]) *field = in.number<size_t>(n, fmt::format("model.{}", key), 1, hi);
  try {
    validate(spec.gpt);
  } catch (const InputError& e) {
    GT_REQUIRE(false, "{}: model: {}", source, e.what());
  }
  return spec;
}

std::unique_ptr<Model> make_model(const ModelSpec& spec) {
  if (spec.kind == "gpt") return std::make_unique<Gpt>(spec.gpt);
  GT_REQUIRE(spec.kind == "mlp", "model.kind is '{}': allowed values are mlp and gpt", spec.kind);
  GT_REQUIRE(!spec.arch.empty(),
             "model.arch is missing: an MLP needs its architecture (e.g. \"784-256-128-10\")");
  return std::make_unique<Mlp>(parse_mlp_config(spec.arch));
}

std::vector<TensorSpec> Model::shaped_specs() const {
  std::vector<TensorSpec> specs = tensor_specs();
  const auto shapes = tensor_shapes();
  GT_ASSERT(shapes.size() == specs.size(), "{} tensors but {} shapes", specs.size(), shapes.size());
  for (size_t t = 0; t < specs.size(); ++t)
    if (shapes[t].size() >= 2) specs[t].cols = shapes[t].back();
  return specs;
}

std::vector<TensorSpec> model_tensor_specs(const ModelSpec& spec) {
  if (!spec.tensors.empty()) return spec.tensors;
  return make_model(spec)->shaped_specs();
}

}  // namespace geotrain::models
