#include "launcher/resume.hpp"

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"
#include "launcher/run_settings.hpp"

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

}  // namespace geotrain::launcher
