// The deployment config's keys that several processes read, each read by exactly one function
// with one set of rules: `regions`, `server.endpoints` and the model's layout (`model.tensors`).
// The servers, the workers and the launcher call these; each process then reads only its own
// section (docs/config.md).
//
// Stateless; InputError (naming the config's source and the key) on bad input.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/yaml_reader.hpp"

namespace geotrain {

// The most regions a deployment may have (a region's bit in the servers' 64-bit masks).
inline constexpr std::size_t kMaxRegions = 64;

// The config's top-level `regions`: a list of 1 to kMaxRegions distinct names.
std::vector<std::string> read_regions(const YamlReader& in, const YAML::Node& root);

// `server.endpoints`: a mapping of region names, each one of `regions`, to endpoints.
std::map<std::string, std::string> read_endpoints(const YamlReader& in, const YAML::Node& endpoints,
                                                  const std::vector<std::string>& regions);

// The keys of the `model` section: the layout every process reads (tensors, critical) and the
// model's own (kind, arch and the GPT's), which models/model_spec.hpp reads and cli/ expands
// into tensors for the servers.
const std::set<std::string>& model_keys();

// `model.tensors`: a list of {name, size}, each size 1 to 2^36 elements.
std::vector<TensorSpec> read_model_tensors(const YamlReader& in, const YAML::Node& tensors);

// `model.critical` against the model's tensors: every glob must match at least one tensor name.
// A glob that matches none is a typo (`fc9.*` on a three-layer MLP) that would leave the tensors
// it meant non-critical without a word; InputError naming the glob and a few tensor names.
void check_critical_globs(const YamlReader& in, const std::vector<std::string>& critical,
                          const std::vector<TensorSpec>& tensors);

}  // namespace geotrain
