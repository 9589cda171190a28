#include "launcher/run/run_settings.hpp"

#include <fstream>
#include <sstream>

#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/wan_profile.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/report/shipped_measurements.hpp"

namespace geotrain::launcher {

namespace {
// Bits per byte above 8 are worse than guessing bytes uniformly; the bound only catches typos.
constexpr double kMaxTargetBpb = 100;
}  // namespace

std::string read_text_file(const std::filesystem::path& file) {
  std::error_code ec;  // a name the file system refuses is a file that cannot be read
  GT_REQUIRE(!std::filesystem::is_directory(file, ec), "'{}' is a directory, not a file",
             file.string());
  GT_REQUIRE(std::filesystem::exists(file, ec), "file '{}' does not exist", file.string());
  std::ifstream f(file);
  GT_REQUIRE(f.good(), "file '{}' cannot be read", file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

RunSettings parse_run_settings(std::string_view yaml_text, std::string_view source,
                               const std::filesystem::path& config_dir,
                               std::string_view default_name,
                               const std::filesystem::path& project_configs) try {
  const YamlReader in{std::string(source)};
  const YAML::Node root = in.load_deployment_config(yaml_text);

  RunSettings s;
  s.name = std::string(default_name);
  s.regions = read_regions(in, root);
  // One machine runs them all: at most 64 a region.
  s.workers = read_region_workers(in, root, s.regions, 64);
  if (auto w = root["worker"]; w && w.IsMap() && w["external"])
    s.external_workers = in.boolean(w["external"], "worker.external");
  s.elastic_regions = read_elastic_regions(in, root, s.regions);

  auto run = root["run"];
  if (run) {
    in.check_keys(run, "run",
                  {"name", "out_dir", "wan_profile", "target_accuracy", "target_val_bpb",
                   "base_port", "startup_timeout_s", "timeout_s", "progress_interval_s", "plots",
                   "netsim_stats_interval_s", "restart", "compare_with"});
    read_shipped_measurements(in, run);  // refused here, before anything starts
    if (auto n = run["name"]) {
      s.name = in.string(n, "run.name");
      const bool ok = !s.name.empty() && s.name.find_first_of("/\\ \t\n") == std::string::npos;
      GT_REQUIRE(ok, "{}: run.name is '{}', allowed: a non-empty name without '/' or spaces",
                 source, s.name);
    }
    if (auto n = run["out_dir"]) s.out_dir = in.string(n, "run.out_dir");
    if (auto n = run["wan_profile"])
      s.wan_profile = find_wan_profile(in.string(n, "run.wan_profile"),
                                       wan_profile_search(config_dir, project_configs),
                                       fmt::format("{}: run.wan_profile", source));
    if (auto n = run["target_accuracy"])
      s.target_accuracy = in.number<double>(n, "run.target_accuracy", 0.0, 1.0);
    if (auto n = run["target_val_bpb"]) {
      s.target_val_bpb = in.number<double>(n, "run.target_val_bpb", 0.0, kMaxTargetBpb);
      GT_REQUIRE(*s.target_val_bpb > 0, "{}: run.target_val_bpb is {}, allowed: (0, {}]", source,
                 *s.target_val_bpb, kMaxTargetBpb);
    }
    GT_REQUIRE(!(s.target_accuracy && s.target_val_bpb),
               "{}: run.target_accuracy and run.target_val_bpb are both set, allowed: one of them "
               "(target_accuracy for classifiers, target_val_bpb for language models)",
               source);
    if (auto n = run["base_port"]) s.base_port = in.number<uint16_t>(n, "run.base_port", 0, 65000);
    if (auto n = run["startup_timeout_s"])
      s.startup_timeout_s = in.number<double>(n, "run.startup_timeout_s", 0.1, 3600);
    if (auto n = run["timeout_s"])
      s.timeout_s = in.number<double>(n, "run.timeout_s", 0, 7 * 86400);
    if (auto n = run["progress_interval_s"])
      s.progress_interval_s = in.number<double>(n, "run.progress_interval_s", 0.1, 3600);
    if (auto n = run["plots"]) s.plots = in.boolean(n, "run.plots");
    if (auto n = run["netsim_stats_interval_s"])
      s.netsim_stats_interval_s = in.number<double>(n, "run.netsim_stats_interval_s", 0.01, 3600);
    if (auto n = run["restart"]) {
      GT_REQUIRE(n.IsMap(),
                 "{}: run.restart must be a mapping like {{max_restarts: 3, backoff_s: 1}}",
                 source);
      in.check_keys(n, "run.restart", {"max_restarts", "backoff_s", "healthy_after_s"});
      if (auto m = n["max_restarts"])
        s.restart.max_restarts = in.number<uint32_t>(m, "run.restart.max_restarts", 0, 1000);
      if (auto b = n["backoff_s"])
        s.restart.backoff_s = in.number<double>(b, "run.restart.backoff_s", 0, 3600);
      if (auto h = n["healthy_after_s"])
        s.restart.healthy_after_s = in.number<double>(h, "run.restart.healthy_after_s", 0, 86400);
    }
  }
  GT_REQUIRE(s.regions.size() == 1 || s.wan_profile,
             "{}: run.wan_profile is missing: with {} regions every inter-region connection goes "
             "through netsim, "
             "which needs a WAN profile (e.g. run.wan_profile: global-3, or geotrain run --wan "
             "global-3)",
             source, s.regions.size());
  return s;
} catch (const YAML::Exception& e) {
  throw yaml_input_error(source, e);  // a check is missing: still an InputError
}

RunSettings load_run_settings(const std::filesystem::path& config_file) {
  const auto text = read_text_file(config_file);
  return parse_run_settings(text, config_file.string(), config_file.parent_path(),
                            config_file.stem().string());
}

}  // namespace geotrain::launcher
