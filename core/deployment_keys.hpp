// The deployment config's keys that several processes read, each read by exactly one function
// with one set of rules: `regions`, `server.endpoints`, the model's layout (`model.tensors`) and
// the protocol settings that servers and leaders must agree on (read_shared_protocol).
// The servers, the workers and the launcher call these; each process then reads only its own
// section (docs/config.md).
//
// Stateless; InputError (naming the config's source and the key) on bad input.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/outer_step.hpp"
#include "core/param_table.hpp"
#include "core/yaml_reader.hpp"

namespace geotrain {

// The most regions a deployment may have (a region's bit in the servers' 64-bit masks).
inline constexpr std::size_t kMaxRegions = 64;

// The config's top-level `regions`: a list of 1 to kMaxRegions distinct names.
std::vector<std::string> read_regions(const YamlReader& in, const YAML::Node& root);

// `server.endpoints` (or another `key` of the same form): a mapping of region names, each one of
// `regions`, to endpoints.
std::map<std::string, std::string> read_endpoints(const YamlReader& in, const YAML::Node& endpoints,
                                                  const std::vector<std::string>& regions,
                                                  const std::string& key = "server.endpoints");

// `server.standby` (docs/server.md, "Standby shards"): each region's shards have a standby in the
// next region's server process (a ring), kept current by their primary, which serves them when the
// primary is gone and hands them back when it restarts. `off` (the default), `on`, or a mapping
// {endpoints, every_rounds, takeover_after_ms}. The servers and the region leaders read it.
struct StandbySettings {
  bool on = false;
  // Region -> where the standby of its shards listens (in standby_host()'s server process). A
  // launched run fills them in; `geotrain server` needs them.
  std::map<std::string, std::string> endpoints;
  uint64_t every_rounds = 1;  // a replica after every this many released rounds
  // How a replica travels: `fp32` (the values themselves, exact), or a codec spec: the change
  // since the last replica through that codec with error feedback, and the exact values every
  // anchor_every replicas (and whenever the standby lacks the base of a change).
  std::string codec = "fp32";
  uint64_t anchor_every = 100;
  // A standby serves the shards only once its primary was silent this long and a leader asks.
  std::chrono::milliseconds takeover_after{2000};
};
StandbySettings read_standby(const YamlReader& in, const YAML::Node& server,
                             const std::vector<std::string>& regions);
// The region whose server process holds region r's standby: the next one, round the ring.
inline uint32_t standby_host(uint32_t region, std::size_t regions) {
  return static_cast<uint32_t>((region + 1) % regions);
}
// The region whose standby the server of region r holds: the previous one.
inline uint32_t standby_guest(uint32_t region, std::size_t regions) {
  return static_cast<uint32_t>((region + regions - 1) % regions);
}

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

// The protocol settings that the servers and the region leaders share, so that both read them
// from the same keys with the same rules:
// - server.staleness_bound: the SSP bound; the servers gate pushes with it, the leaders floor
//   their pulls with it (0: synchronous).
// - server.optimizer {lr, momentum, nesterov}: the outer step (OuterStep).
// - worker.fragments and worker.stream_critical: the streaming layout; the servers cut their
//   shard map by it (server/shard_map.hpp), the leaders exchange one fragment at a time.
// Every key is optional (the defaults above and below). InputError naming the key on a value
// out of range or an unknown key in server.optimizer.
struct SharedProtocol {
  uint32_t staleness_bound = 0;
  OuterStep outer;
  uint32_t fragments = 1;  // 1 to 1024
  // false with fragments > 1: the critical tensors form a fragment of their own, index
  // `fragments`, exchanged every round.
  bool stream_critical = true;
};
SharedProtocol read_shared_protocol(const YamlReader& in, const YAML::Node& root);

}  // namespace geotrain
