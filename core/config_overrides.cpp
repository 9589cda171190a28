#include "core/config_overrides.hpp"

#include <functional>

#include "core/error.hpp"
#include "core/yaml_reader.hpp"

namespace geotrain {

namespace {
std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}
}  // namespace

ConfigOverride parse_override(const std::string& argument) {
  const auto eq = argument.find('=');
  GT_REQUIRE(eq != std::string::npos,
             "--set '{}': expected section.key=value (e.g. --set worker.lr=0.2)", argument);
  ConfigOverride o{trim(argument.substr(0, eq)), trim(argument.substr(eq + 1)),
                   "--set " + argument};
  GT_REQUIRE(!o.key.empty(), "--set '{}': the key before '=' is empty (e.g. --set worker.lr=0.2)",
             argument);
  for (const auto& part : split_key(o.key))
    GT_REQUIRE(!part.empty() && part.find_first_of(" \t:[]{}") == std::string::npos,
               "--set '{}': key '{}' is not a dotted config key (section.key, e.g. "
               "worker.optimizer.momentum)",
               argument, o.key);
  GT_REQUIRE(!o.value.empty(), "--set '{}': the value after '=' is empty", argument);
  return o;
}

std::vector<ConfigOverride> parse_overrides(const std::vector<std::string>& arguments) {
  std::vector<ConfigOverride> out;
  for (const auto& a : arguments) out.push_back(parse_override(a));
  return out;
}

void set_config_path(YAML::Node root, const std::string& key, const YAML::Node& value,
                     const std::string& source) {
  const auto parts = split_key(key);
  for (const auto& p : parts)
    GT_REQUIRE(!p.empty(), "{}: key '{}' is not a dotted config key", source, key);
  // yaml-cpp nodes are handles: walking with operator= would rebind, so build by recursion.
  std::function<void(YAML::Node, std::size_t)> walk = [&](YAML::Node node, std::size_t i) {
    if (i + 1 == parts.size()) {
      node[parts[i]] = value;
      return;
    }
    YAML::Node next = node[parts[i]];
    if (!next || next.IsNull()) {
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    } else if (!next.IsMap()) {
      std::string path;
      for (std::size_t j = 0; j <= i; ++j) path += (j ? "." : "") + parts[j];
      GT_REQUIRE(false, "{}: cannot set '{}': '{}' is a value, not a section with keys", source,
                 key, path);
    }
    walk(node[parts[i]], i + 1);
  };
  walk(root, 0);
}

YAML::Node apply_overrides(YAML::Node root, const std::vector<ConfigOverride>& overrides,
                           const std::string& source) {
  for (const auto& o : overrides) {
    // Not YAML, or a mapping with a key written twice: an error naming the override.
    const YAML::Node value =
        parse_yaml(o.value, fmt::format("{}: {}: the value '{}'", source, o.origin, o.value));
    set_config_path(root, o.key, value, source);
  }
  return root;
}

std::string apply_overrides(const std::string& yaml_text,
                            const std::vector<ConfigOverride>& overrides,
                            const std::string& source) {
  if (overrides.empty()) return yaml_text;
  const YamlReader in{source};
  YAML::Node root = apply_overrides(in.load_mapping(yaml_text), overrides, source);
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string describe_source(const std::string& file, const std::vector<ConfigOverride>& overrides) {
  if (overrides.empty()) return file;
  std::string with;
  for (const auto& o : overrides) with += (with.empty() ? "" : ", ") + o.origin;
  return fmt::format("{} (with {})", file, with);
}

}  // namespace geotrain
