#include "cli/config_text.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "models/model_spec.hpp"

namespace geotrain::cli {

std::string resolved_config_text(const std::filesystem::path& file) {
  std::ifstream f(file);
  GT_REQUIRE(f.good(), "config file '{}' cannot be read", file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return resolved_config_text(ss.str(), file.string());
}

std::string resolved_config_text(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    GT_REQUIRE(false, "{}: not valid YAML: {}", source, e.what());
  }
  auto model = root["model"];
  if (!model || !model.IsMap() || model["tensors"]) return text;
  if (!model["arch"] && !model["kind"] && !model["preset"]) return text;
  models::ModelSpec spec = models::parse_model_spec(model, YamlReader(source));
  YAML::Node tensors(YAML::NodeType::Sequence);
  for (const auto& t : models::model_tensor_specs(spec)) {
    YAML::Node n;
    n["name"] = t.name;
    n["size"] = t.size;
    tensors.push_back(n);
  }
  model["tensors"] = tensors;
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

}  // namespace geotrain::cli
