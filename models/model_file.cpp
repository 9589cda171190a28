#include "models/model_file.hpp"

#include "core/error.hpp"
#include "models/safetensors.hpp"

namespace geotrain::models {

std::map<std::string, std::string> model_metadata(const ModelSpec& spec, uint64_t seed,
                                                  uint64_t parameters) {
  std::map<std::string, std::string> m = {{"format", "geotrain"},
                                          {"model", spec.kind},
                                          {"seed", std::to_string(seed)},
                                          {"parameters", std::to_string(parameters)}};
  if (spec.kind == "gpt") {
    const auto& c = spec.gpt;
    m["vocab"] = std::to_string(c.vocab);
    m["d_model"] = std::to_string(c.d_model);
    m["layers"] = std::to_string(c.layers);
    m["heads"] = std::to_string(c.heads);
    m["seq_len"] = std::to_string(c.seq_len);
    m["mlp_ratio"] = std::to_string(c.mlp_ratio);
    if (!spec.preset.empty()) m["preset"] = spec.preset;
  } else {
    m["arch"] = spec.arch;
  }
  return m;
}

size_t write_model_file(const std::filesystem::path& file, const Model& model,
                        const ParamTable& table, ConstFloatSpan params, const ModelSpec& spec,
                        uint64_t seed, const std::map<std::string, std::string>& extra) {
  GT_REQUIRE(params.size() == table.total_elements(),
             "model file '{}': {} parameters, the table has {}", file.string(), params.size(),
             table.total_elements());
  const auto shapes = model.tensor_shapes();
  GT_ASSERT(shapes.size() == table.tensors().size(), "{} shapes for {} tensors", shapes.size(),
            table.tensors().size());
  std::vector<SafetensorView> views;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const TensorInfo& t = table.tensors()[i];
    views.push_back({t.name, shapes[i], params.subspan(t.offset, t.size)});
  }
  auto metadata = model_metadata(spec, seed, params.size());
  for (const auto& [key, value] : extra) metadata[key] = value;
  write_safetensors(file, views, metadata);
  return views.size();
}

}  // namespace geotrain::models
