// netsim configuration files (YAML), parsed into plain structs.
//
// A WAN *profile* (configs/wan/*.yaml) names regions and the properties of the link between
// each pair, and may give one link for every pair it does not list (`between: any`), which is
// how one profile fits any deployment (configs/wan/lan.yaml); a *netsim config* picks a profile
// and adds, per directed link, the address to listen on and the target to forward to, plus faults
// and statistics options. See docs/netsim.md for the reference. Parsing is strict: unknown keys,
// wrong types and values out of range throw InputError naming the file, the key path, the value
// and what is allowed. Pure functions; no thread-safety concerns.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "netsim/link.hpp"
#include "netsim/proxy.hpp"

namespace geotrain::netsim {

struct WanProfile {
  std::string name;
  std::string description;
  std::vector<std::string> regions;
  std::map<std::pair<std::string, std::string>, LinkProperties> links;  // directed (from, to)
  // `between: any`: every ordered pair of distinct regions that `links` does not list,
  // including regions the profile does not name.
  std::optional<LinkProperties> any_pair;

  // Properties of from->to: the listed link, else `any_pair`; throws InputError when the
  // profile has neither.
  const LinkProperties& link(const std::string& from, const std::string& to) const;
  // The same, or nullptr when the profile has neither.
  const LinkProperties* find_link(const std::string& from, const std::string& to) const;
};

struct NetsimConfig {
  WanProfile profile;
  ProxyOptions options;
  std::vector<LinkConfig> links;
};

// `where` names the source in error messages (a file name, or e.g. "<test>").
WanProfile parse_profile(const std::string& yaml_text, const std::string& where);
WanProfile load_profile(const std::filesystem::path& file);

// A profile given as a path is resolved relative to `base_dir`.
NetsimConfig parse_netsim_config(const std::string& yaml_text, const std::string& where,
                                 const std::filesystem::path& base_dir);
NetsimConfig load_netsim_config(const std::filesystem::path& file);

}  // namespace geotrain::netsim
