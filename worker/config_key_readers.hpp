// The readers of the `worker` keys that are more than a value in a range (worker/config_keys.hpp's
// table names them): a choice with a mode, `auto`, a key checked against keys read before it in
// the table's order, a list or a map of regions. Each reads a present node into WorkerConfig;
// InputError naming the source and the key.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "core/yaml_reader.hpp"

namespace geotrain::worker {

struct WorkerConfig;

// "worker.<path>", the name errors give.
std::string worker_key(std::string_view path);

// A scalar `auto` (the keys that take a number or auto).
bool is_auto(const YAML::Node& n);

void read_overlap(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_fragment_delay(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_optimizer_kind(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_precision(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_zero_stage(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_shard_wait(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_slowdowns(const YamlReader& in, const YAML::Node& list, WorkerConfig& c);
std::optional<nlohmann::json> write_slowdowns(const WorkerConfig& c, std::string_view region);
void read_routes(const YamlReader& in, const YAML::Node& routes, WorkerConfig& c);
void read_round_time(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);
void read_max_local_steps(const YamlReader& in, const YAML::Node& n, WorkerConfig& c);

}  // namespace geotrain::worker
