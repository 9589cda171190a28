#include "launcher/run/resume.hpp"

#include <yaml-cpp/yaml.h>

#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/region_workers.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/run/run_settings.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;

std::string resume_config_text(const fs::path& run_dir) {
  GT_REQUIRE(fs::is_directory(run_dir), "--resume {}: no such folder", run_dir.string());
  const auto config_file = run_dir / "config.yaml";
  GT_REQUIRE(fs::is_regular_file(config_file),
             "--resume {}: not a run folder (it has no config.yaml)", run_dir.string());
  const std::string text = read_text_file(config_file);
  const auto netsim_file = run_dir / "netsim.yaml";
  if (!fs::is_regular_file(netsim_file)) return text;
  try {
    YAML::Node root = YAML::Load(text);
    const YAML::Node old = YAML::LoadFile(netsim_file.string());
    YAML::Node extras(YAML::NodeType::Map);
    for (const char* key : {"seed", "faults_origin_unix_s"})
      if (old[key]) extras[key] = old[key];
    // Per-link keys beyond what geotrain run sets (from, to, listen, target) are the user's.
    for (const auto& link : old["links"]) {
      YAML::Node mine(YAML::NodeType::Map);
      bool any = false;
      for (const auto& kv : link) {
        const auto key = kv.first.as<std::string>();
        if (key == "listen" || key == "target") continue;
        mine[key] = kv.second;
        any = any || (key != "from" && key != "to");
      }
      if (any) extras["links"].push_back(mine);
    }
    root["netsim"] = extras;
    YAML::Emitter out;
    out << root;
    return std::string("# Resumed by geotrain run --resume from ") + config_file.string() + "\n" +
           out.c_str() + "\n";
  } catch (const YAML::Exception& e) {
    GT_REQUIRE(false, "--resume {}: config.yaml or netsim.yaml cannot be read as YAML ({})",
               run_dir.string(), e.what());
  }
  return text;
}

namespace {
// A folder that holds a finished checkpoint (ckpt-<round>; a ckpt-<round>.tmp is one cut short).
bool has_checkpoint(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (it->is_directory(ec) && name.starts_with("ckpt-") && !name.ends_with(".tmp")) return true;
  }
  return false;
}

// `section.checkpoint.dir` of the config (`fallback` when unset), under the run folder when
// relative, as the servers and workers place it.
fs::path checkpoint_dir(const YamlReader& in, const YAML::Node& root, const char* section,
                        const char* fallback, const fs::path& run_dir) {
  fs::path dir = fallback;
  const YAML::Node s = root[section];
  if (s && s.IsMap() && s["checkpoint"] && s["checkpoint"].IsMap() && s["checkpoint"]["dir"])
    dir = in.string(s["checkpoint"]["dir"], fmt::format("{}.checkpoint.dir", section));
  return dir.is_absolute() ? dir : run_dir / dir;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
}  // namespace

std::string ResumeSources::describe() const {
  std::string out =
      servers.empty()
          ? fmt::format("no server checkpoint in {}: the servers start afresh", server_dir.string())
          : fmt::format("servers from their checkpoints ({} of {}: {})", servers.size(),
                        server_count, join(servers));
  if (!workers.empty())
    out += fmt::format("; workers from their snapshots ({} of {})", workers.size(), worker_count);
  else if (worker_count > 0)
    out += fmt::format("; no worker snapshot in {}: the workers take the servers' values",
                       worker_dir.string());
  return out;
}

ResumeSources find_resume_sources(const fs::path& run_dir, const std::string& config_text) {
  const YamlReader in{(run_dir / "config.yaml").string()};
  const YAML::Node root = in.load_mapping(config_text);
  const auto regions = read_regions(in, root);
  const auto workers = read_region_workers(in, root, regions, 64);
  bool external = false;
  if (const auto w = root["worker"]; w && w.IsMap() && w["external"])
    external = in.boolean(w["external"], "worker.external");

  ResumeSources found;
  found.server_dir = checkpoint_dir(in, root, "server", "checkpoints", run_dir);
  found.worker_dir = checkpoint_dir(in, root, "worker", "worker-checkpoints", run_dir);
  found.server_count = regions.size();
  found.worker_count = external ? 0 : workers.total();
  for (const auto& region : regions) {
    if (has_checkpoint(found.server_dir / region)) found.servers.push_back(region);
    for (uint32_t rank = 0; rank < workers.in(region) && !external; ++rank) {
      const auto name = fmt::format("{}-{}", region, rank);
      if (has_checkpoint(found.worker_dir / name)) found.workers.push_back(name);
    }
  }
  GT_REQUIRE(!found.servers.empty() || !found.workers.empty(),
             "--resume {}: nothing to resume from: no server checkpoint (ckpt-* in {}/<region>) "
             "and no worker snapshot (ckpt-* in {}/<region>-<rank>). The run did not checkpoint: "
             "server.checkpoint.every and worker.checkpoint.every (or run.restart) make a run "
             "resumable. Start it again as a new run; this folder is left as it is",
             run_dir.string(), found.server_dir.string(), found.worker_dir.string());
  return found;
}

}  // namespace geotrain::launcher
