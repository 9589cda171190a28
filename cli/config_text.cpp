#include "cli/config_text.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "models/mlp.hpp"

namespace geotrain::cli {

std::string resolved_config_text(const std::filesystem::path& file) {
  std::ifstream f(file);
  GT_REQUIRE(f.good(), "config file '{}' cannot be read", file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(ss.str());
  } catch (const YAML::Exception& e) {
    GT_REQUIRE(false, "{}: not valid YAML: {}", file.string(), e.what());
  }
  auto model = root["model"];
  if (!model || !model.IsMap() || !model["arch"] || model["tensors"]) return ss.str();
  std::string arch;
  try {
    arch = model["arch"].as<std::string>();
  } catch (const YAML::Exception&) {
    GT_REQUIRE(false, "{}: model.arch must be a string such as \"784-256-128-10\"", file.string());
  }
  models::MlpConfig mlp;
  try {
    mlp = models::parse_mlp_config(arch);
  } catch (const InputError& e) {
    GT_REQUIRE(false, "{}: model.arch: {}", file.string(), e.what());
  }
  YAML::Node tensors(YAML::NodeType::Sequence);
  for (const auto& t : models::Mlp(mlp).tensor_specs()) {
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
