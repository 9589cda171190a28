#include "core/wan_profile.hpp"

#include <algorithm>
#include <set>
#include <system_error>

#include "core/closest_name.hpp"
#include "core/error.hpp"

namespace geotrain {

namespace fs = std::filesystem;

namespace {
// Error-code overloads throughout: a name the file system refuses (longer than NAME_MAX) is no
// file here, and ends in the "no such WAN profile" error rather than a std::filesystem_error.
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

fs::path absolute_normal(const fs::path& p) {
  std::error_code ec;
  const auto a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal();
}

// The profiles a folder holds, by name (example-netsim.yaml is a netsim config, not a profile).
void add_profile_names(const fs::path& dir, std::set<std::string>& names) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".yaml" && it->path().stem() != "example-netsim")
      names.insert(it->path().stem().string());
}

template <typename Items>
std::string join(const Items& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + fs::path(i).string();
  return out;
}
}  // namespace

WanProfileSearch wan_profile_search(const fs::path& config_dir, const fs::path& project_configs) {
  const fs::path dir = config_dir.empty() ? fs::path(".") : config_dir;
  WanProfileSearch search{{dir}, {dir / "wan"}};
  if (!project_configs.empty()) {
    search.roots.push_back(project_configs);
    search.name_dirs.push_back(project_configs / "wan");
  }
  return search;
}

fs::path find_wan_profile(const std::string& value, const WanProfileSearch& search,
                          const std::string& what) {
  GT_REQUIRE(!value.empty(),
             "{} is empty; allowed: a WAN profile name (e.g. global-3, lan) or file", what);
  std::vector<fs::path> tried;
  const auto candidate = [&](const fs::path& p) {
    const auto file = absolute_normal(p);
    if (std::find(tried.begin(), tried.end(), file) == tried.end()) tried.push_back(file);
  };
  const fs::path given(value);
  if (given.is_absolute()) {
    candidate(given);
  } else {
    for (const auto& root : search.roots) candidate(root / given);
    // A name: NAME.yaml in the profile folders (NAME itself when it already ends in .yaml).
    if (value.find('/') == std::string::npos)
      for (const auto& dir : search.name_dirs)
        candidate(dir / (given.extension() == ".yaml" ? value : value + ".yaml"));
  }
  for (const auto& file : tried)
    if (is_file(file)) return file;
  for (const auto& file : tried) {
    std::error_code ec;
    GT_REQUIRE(!fs::is_directory(file, ec),
               "{} is '{}': {} is a folder, not a WAN profile file (its profiles are the .yaml "
               "files in it)",
               what, value, file.string());
  }

  std::set<std::string> names;
  for (const auto& dir : search.name_dirs) add_profile_names(dir, names);
  const std::string relative_to =
      search.roots.empty() ? ""
                           : " (relative to " + absolute_normal(search.roots[0]).string() + ")";
  const auto guess = closest_name(given.stem().string(), names);
  GT_REQUIRE(false,
             "{} is '{}': no such WAN profile{}; tried {}; allowed: the name of a profile ({}) or "
             "a profile file{}{}",
             what, value, guess ? " (did you mean '" + *guess + "'?)" : "", join(tried),
             names.empty() ? "none found" : join(names), relative_to,
             what == "--wan" ? "" : "; `geotrain run --wan NAME` picks one for a single run");
  return {};
}

WanProfileSearch command_line_search(const fs::path& config_dir, const fs::path& project_configs) {
  auto search = wan_profile_search(config_dir, project_configs);
  search.roots.insert(search.roots.begin(), fs::current_path());
  return search;
}

WanProfileSearch sweep_search(const fs::path& sweep_dir, const fs::path& base_dir,
                              const fs::path& project_configs) {
  WanProfileSearch search{{sweep_dir}, {base_dir / "wan", sweep_dir / ".." / "wan"}};
  if (!project_configs.empty()) {
    search.roots.push_back(project_configs);
    search.name_dirs.push_back(project_configs / "wan");
  }
  return search;
}

std::optional<fs::path> resolve_wan_profile(YAML::Node& config, const fs::path& config_dir,
                                            const fs::path& project_configs,
                                            const std::string& source) {
  if (!config.IsMap() || !config["run"] || !config["run"].IsMap()) return std::nullopt;
  YAML::Node run = config["run"];
  if (!run["wan_profile"]) return std::nullopt;
  const YAML::Node value = run["wan_profile"];
  GT_REQUIRE(value.IsScalar(),
             "{}: run.wan_profile is not a string: allowed: a WAN profile name (e.g. lan) or file",
             source);
  const auto file =
      find_wan_profile(value.Scalar(), wan_profile_search(config_dir, project_configs),
                       source + ": run.wan_profile");
  run["wan_profile"] = file.string();
  return file;
}

}  // namespace geotrain
