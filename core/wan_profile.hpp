// Finding a WAN profile file from what a user wrote: `run.wan_profile` in a config (also set by
// `--set run.wan_profile=...`), `geotrain run --wan`, and a sweep's `wan` key. Each may be a
// profile's name (`global-3`, `lan`) or a path (`wan/global-3.yaml`, `/etc/geo/wan.yaml`); one
// function, find_wan_profile(), resolves all of them, so that a value that works in one place
// works in the others; each place's search is built here too, and a config's run.wan_profile is
// made absolute by resolve_wan_profile() wherever a config is read (geotrain run, a sweep's base,
// the Python API's configs).
//
// A relative path is tried against the config file's folder, then against the project's
// configs/ folder (so `wan/global-3.yaml` still works in a copy of configs/demo.yaml made
// elsewhere); a name (no '/') is NAME.yaml in the config's wan/ folder, then in the project's
// configs/wan/. Pure functions apart from reading the file system; no shared state.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace geotrain {

// Where find_wan_profile() looks, in order.
struct WanProfileSearch {
  std::vector<std::filesystem::path> roots;      // a relative path is tried against each
  std::vector<std::filesystem::path> name_dirs;  // a name NAME is NAME.yaml (or NAME) in each
};

// For a config in `config_dir` (empty: the working directory): roots {config_dir,
// project_configs}, names in {config_dir/wan, project_configs/wan}. `project_configs` is the
// project's configs/ folder (empty: none).
WanProfileSearch wan_profile_search(const std::filesystem::path& config_dir,
                                    const std::filesystem::path& project_configs);

// `geotrain run --wan`: as a config's run.wan_profile, but a path is relative to the working
// directory first.
WanProfileSearch command_line_search(const std::filesystem::path& config_dir,
                                     const std::filesystem::path& project_configs);

// A sweep's `wan` key and its points' run.wan_profile: a path relative to the sweep file (then to
// the project's configs/), a name NAME.yaml in the base config's wan/ folder, the sweep's ../wan/,
// the project's configs/wan/.
WanProfileSearch sweep_search(const std::filesystem::path& sweep_dir,
                              const std::filesystem::path& base_dir,
                              const std::filesystem::path& project_configs);

// `config`'s run.wan_profile, when it has one, found from `config_dir` (wan_profile_search) and
// written back as the absolute file, so that the config can be read from anywhere; returns it.
// InputError starting with `source` when it is not a string or names no profile.
std::optional<std::filesystem::path> resolve_wan_profile(
    YAML::Node& config, const std::filesystem::path& config_dir,
    const std::filesystem::path& project_configs, const std::string& source);

// The profile file `value` names: an absolute path as it is; a relative one against each root;
// then, when `value` has no '/', NAME and NAME.yaml in each name folder. Returns the first
// regular file, absolute and normalized. InputError otherwise, starting with `what` (e.g.
// "my.yaml: run.wan_profile", "--wan") and naming the value, the nearest profile name when it
// looks like a typo, every file tried, the profiles the name folders hold, and `geotrain run
// --wan NAME`.
std::filesystem::path find_wan_profile(const std::string& value, const WanProfileSearch& search,
                                       const std::string& what);

}  // namespace geotrain
