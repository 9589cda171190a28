// ModelSpec: the `model:` section of a deployment config, and the factory that builds the model
// it names. Every process that needs the model (workers, `export-init`, the CLI's expansion of
// model.tensors for the servers) goes through here, so they all derive the same table.
//
//   model: {kind: mlp, arch: "784-256-128-10", critical: ["fc3.*"]}       # kind defaults to mlp
//   model: {kind: gpt, preset: gpt-tiny, critical: ["ln_f.*"]}
//   model: {kind: gpt, preset: gpt-tiny, layers: 2, seq_len: 64}          # a preset, overridden
//   model: {kind: gpt, vocab: 256, d_model: 64, layers: 2, heads: 2, seq_len: 32, mlp_ratio: 4}
//
// Plain value; parsing only reads the node. Unknown keys are InputErrors naming the key and what
// is allowed; so are keys of the other kind (model.layers for an MLP).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/yaml_reader.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "models/model.hpp"

namespace geotrain::models {

struct ModelSpec {
  std::string kind = "mlp";           // mlp | gpt
  std::string arch;                   // mlp: models::parse_mlp_config
  std::string preset;                 // gpt: the preset named, if any
  GptConfig gpt;                      // gpt: the preset with the keys given applied
  std::vector<std::string> critical;  // tensor globs
  std::vector<TensorSpec> tensors;    // model.tensors, when given explicitly (servers)

  bool is_language_model() const { return kind == "gpt"; }
  // Tokens per sample window: seq_len + 1 for a language model, 0 otherwise.
  size_t window() const { return is_language_model() ? gpt.seq_len + 1 : 0; }
};

// Reads the `model` mapping (`in` names the source in errors).
ModelSpec parse_model_spec(const YAML::Node& model, const YamlReader& in);
// InputError when the spec cannot be built (an MLP given only by model.tensors has no arch).
std::unique_ptr<Model> make_model(const ModelSpec& spec);
// The model's tensors (model.tensors when given, else the built model's).
std::vector<TensorSpec> model_tensor_specs(const ModelSpec& spec);

}  // namespace geotrain::models
