// YamlReader: strict reading of YAML config values, with errors that name the file, the key,
// the value and what is allowed (InputError). Unknown keys are errors, never ignored.
//
// Holds only the source name used in messages. Header-only; stateless calls, thread-safe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace geotrain {

// For a loader's function-try-block: a yaml-cpp exception that escaped the loader's own checks
// (a node of one kind read as another: BadSubscript, InvalidNode, BadConversion) as an InputError
// naming the source and, where yaml-cpp knows it, the line. Loaders still check what they read
// and say what is allowed; this only keeps their contract (bad input throws InputError) where a
// check is missing (fuzz/ found several).
inline InputError yaml_input_error(std::string_view source, const YAML::Exception& e) {
  return InputError(fmt::format("{}: not a valid config: {}", source, e.what()));
}

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // Parses `text` as YAML whose root must be a mapping (InputError naming the source otherwise).
  YAML::Node load_mapping(std::string_view text, const std::string& what = "the config") const {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      GT_REQUIRE(false, "{}: not valid YAML: {}", source_, e.what());
    }
    GT_REQUIRE(root.IsMap(), "{}: {} must be a mapping", source_, what);
    return root;
  }

  // The deployment config every process reads: a mapping of these sections only. Each process
  // then reads its own sections strictly and leaves the others to their owners.
  YAML::Node load_deployment_config(std::string_view text) const {
    YAML::Node root = load_mapping(text);
    check_keys(root, "",
               {"regions", "model", "server", "worker", "netsim", "run", "sweep", "security"});
    return root;
  }

  // `node` must be a mapping whose keys are all in `allowed`.
  void check_keys(const YAML::Node& node, const std::string& where,
                  const std::set<std::string>& allowed) const {
    GT_REQUIRE(node.IsMap(), "{}: '{}' must be a mapping", source_, where);
    for (const auto& kv : node) {
      // A complex key (`? [a, b]: x`, `{a: 1}: x`) is not a name: refuse it here, not with
      // yaml-cpp's BadConversion below (found by fuzz/run_config.cpp).
      GT_REQUIRE(kv.first.IsScalar(), "{}: '{}' has a key that is not a plain name ({})", source_,
                 where.empty() ? "the top level" : where, YAML::Dump(kv.first));
      const auto key = kv.first.as<std::string>();
      if (allowed.count(key)) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      GT_REQUIRE(false, "{}: unknown key '{}{}' (allowed: {})", source_,
                 where.empty() ? "" : where + ".", key, list);
    }
  }

  // A number in [lo, hi].
  template <typename T>
  T number(const YAML::Node& node, const std::string& key, T lo, T hi) const {
    T value{};
    bool ok = node.IsScalar();
    if (ok) {
      try {
        value = node.as<T>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    // yaml-cpp reads "-1" as a huge unsigned; refuse a sign on unsigned keys explicitly.
    if (ok && std::is_unsigned_v<T> && node.Scalar().find('-') != std::string::npos) ok = false;
    GT_REQUIRE(ok, "{}: {} is '{}', allowed: a number in [{}, {}]", source_, key, YAML::Dump(node),
               lo, hi);
    GT_REQUIRE(value >= lo && value <= hi, "{}: {} is {}, allowed: [{}, {}]", source_, key, value,
               lo, hi);
    return value;
  }

  std::string string(const YAML::Node& node, const std::string& key) const {
    GT_REQUIRE(node.IsScalar(), "{}: {} must be a string, not '{}'", source_, key,
               YAML::Dump(node));
    return node.as<std::string>();
  }

  // A string from a fixed set.
  std::string choice(const YAML::Node& node, const std::string& key,
                     const std::set<std::string>& allowed) const {
    std::string value = string(node, key);
    if (!allowed.count(value)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      GT_REQUIRE(false, "{}: {} is '{}', allowed: {}", source_, key, value, list);
    }
    return value;
  }

  bool boolean(const YAML::Node& node, const std::string& key) const {
    bool value = false;
    bool ok = node.IsScalar();
    if (ok) {
      try {
        value = node.as<bool>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    GT_REQUIRE(ok, "{}: {} is '{}', allowed: true or false", source_, key, YAML::Dump(node));
    return value;
  }

  std::vector<std::string> strings(const YAML::Node& node, const std::string& key) const {
    GT_REQUIRE(node.IsSequence(), "{}: {} must be a list of strings", source_, key);
    std::vector<std::string> out;
    for (const auto& n : node) out.push_back(string(n, key + "[]"));
    return out;
  }

 private:
  std::string source_;
};

}  // namespace geotrain
