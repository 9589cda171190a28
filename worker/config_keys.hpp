// The `worker` section's keys, each described once: its path under `worker`, how the parser reads
// it into WorkerConfig (with the checks that need only keys read before it), and how its effective
// value is written back. worker/config.cpp reads the section through this table, in its order;
// worker_settings() writes the section's effective values from it (the Python API's
// `OuterSync.settings`, docs/python.md), and a test holds docs/training.md's key table to it. A new
// worker key is a WorkerConfig member and a row here.
//
// Pure functions over plain structs; InputError (naming the source and the key) on bad input.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/yaml_reader.hpp"

namespace geotrain::worker {

struct WorkerConfig;

struct WorkerKey {
  std::string path;  // under `worker`: "lr", "optimizer.beta1" (one level of sections)
  // Reads the key's node, which is present, into the config. Empty: the key is read with the
  // top-level keys (core/region_workers.hpp, core/deployment_keys.hpp), because the launcher and
  // the servers read it too, or is an older spelling of another key.
  std::function<void(const YamlReader&, const YAML::Node&, WorkerConfig&)> read;
  // The key's effective value, as the worker of `region` runs with it (a key per region gives
  // that region's); nullopt: not written (an older spelling, or a key that does not apply).
  std::function<std::optional<nlohmann::json>(const WorkerConfig&, std::string_view region)> write;
};

// Every key of the `worker` section, in the order the parser reads them.
const std::vector<WorkerKey>& worker_keys();

// The names allowed directly under worker.<section> ("" for `worker` itself: its keys and its
// sections' names).
std::set<std::string> worker_key_names(std::string_view section);

// Reads every key present under `worker` (a mapping) into `c`, through the table: unknown keys and
// a section that is not a mapping are InputErrors.
void read_worker_section(const YamlReader& in, const YAML::Node& worker, WorkerConfig& c);

// The `worker` section as the worker of `region` runs with it: every key's effective value (the
// defaults filled in), sections as objects.
nlohmann::json worker_settings(const WorkerConfig& c, std::string_view region);

}  // namespace geotrain::worker
