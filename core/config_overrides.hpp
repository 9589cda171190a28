// Command-line overrides of config keys: `--set section.key=value` (repeatable) on `geotrain
// run`, `sweep`, `server` and `worker`, and `geotrain run --wan PROFILE`.
//
// An override is applied to the config's YAML text before any parser sees it, so the value is
// checked exactly like the same key written in the file: an unknown key or a bad value is an
// error from the section's own parser, naming the key and the source, which reads
// "demo.yaml (with --set worker.lr=0.2)". The value is YAML: `0.2`, `onebit`, `[a, b]`,
// `{lr: 0.1}`. Dotted keys create the mappings on the way (`worker.optimizer.lr=0.01`).
// `geotrain run` bakes the overrides into the run folder's config.yaml, which its children
// read, so the folder records them and the children need no flags.
//
// `--wan` and `run.wan_profile` take a profile's name or a path: core/wan_profile.hpp
// resolves both. Pure functions; no shared state.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace geotrain {

struct ConfigOverride {
  std::string key;     // dotted path: "worker.optimizer.lr", "regions"
  std::string value;   // YAML text: "0.01", "[a, b]"
  std::string origin;  // how the user wrote it, for messages: "--set worker.lr=0.2", "--wan lan"
};

// Parses "section.key=value" (split at the first '='). InputError naming the argument when the
// key is empty, has an empty part ("worker..lr") or the value is empty.
ConfigOverride parse_override(const std::string& argument);
std::vector<ConfigOverride> parse_overrides(const std::vector<std::string>& arguments);

// Sets `key` (a.b.c) in the mapping `root` to `value`, creating mappings on the way. InputError
// naming `source` and the key when a part on the way is a value, not a section (setting
// worker.lr.x where worker.lr is a number).
void set_config_path(YAML::Node root, const std::string& key, const YAML::Node& value,
                     const std::string& source);

// Applies every override, in order, to the config text; returns the new text (comments are not
// kept). InputError naming `source` when the text is not a YAML mapping or a value is not YAML.
YAML::Node apply_overrides(YAML::Node root, const std::vector<ConfigOverride>& overrides,
                           const std::string& source);
std::string apply_overrides(const std::string& yaml_text,
                            const std::vector<ConfigOverride>& overrides,
                            const std::string& source);

// "demo.yaml" with no overrides, else "demo.yaml (with --set worker.lr=0.2, --wan lan)": the
// name config errors give the source.
std::string describe_source(const std::string& file, const std::vector<ConfigOverride>& overrides);

}  // namespace geotrain
