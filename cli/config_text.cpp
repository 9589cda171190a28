#include "cli/config_text.hpp"

#include <yaml-cpp/yaml.h>

#include <set>
#include <system_error>

#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/run/run_settings.hpp"
#include "models/model_spec.hpp"
#include "server/config.hpp"
#include "worker/backend/backend_factory.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/config.hpp"

namespace geotrain::cli {

namespace fs = std::filesystem;

void require_config_file(const fs::path& file) {
  std::error_code ec;  // error-code overloads: a name the file system refuses is no file
  if (fs::is_regular_file(file, ec)) return;
  if (fs::is_directory(file, ec)) {
    std::set<std::string> yaml;
    for (fs::directory_iterator it(file, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".yaml") yaml.insert(it->path().filename().string());
    std::string list;
    for (const auto& y : yaml) list += (list.empty() ? "" : ", ") + y;
    GT_REQUIRE(false, "config file '{}' is a directory, not a YAML file ({})", file.string(),
               list.empty() ? "it holds no .yaml file" : "it holds " + list);
  }
  GT_REQUIRE(false, "config file '{}' does not exist", file.string());
}

fs::path shipped_file(const fs::path& relative) {
  std::error_code ec;
  if (fs::exists(relative, ec)) return relative;
  const fs::path source = fs::path(GEOTRAIN_SOURCE_DIR) / relative;
  if (fs::exists(source, ec)) return source;
  return relative;
}

std::string resolved_config_text(const std::filesystem::path& file) {
  return resolved_config_text(launcher::read_text_file(file), file.string());
}

std::string resolved_config_text(const std::string& text, const std::string& source) {
  const YamlReader in(source);
  YAML::Node root = in.load_mapping(text);  // a key written twice is an error here too
  auto model = root["model"];
  if (!model || !model.IsMap()) return text;
  if (model["tensors"] || (!model["arch"] && !model["kind"] && !model["preset"])) {
    // Given as tensors (or not at all): nothing to expand; the globs still have to match.
    if (model["tensors"] && model["critical"])
      check_critical_globs(in, in.strings(model["critical"], "model.critical"),
                           read_model_tensors(in, model["tensors"]));
    return text;
  }
  models::ModelSpec spec = models::parse_model_spec(model, in);
  const auto specs = models::model_tensor_specs(spec);
  check_critical_globs(in, spec.critical, specs);
  YAML::Node tensors(YAML::NodeType::Sequence);
  for (const auto& t : specs) {
    YAML::Node n;
    n["name"] = t.name;
    n["size"] = t.size;
    if (t.cols != 0) n["cols"] = t.cols;  // a matrix's columns (powersgd on the downlink)
    tensors.push_back(n);
  }
  model["tensors"] = tensors;
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

namespace {
// The config as the launcher's children get it: security.curve: auto resolved (to false; the
// children take true as well). Other text is returned as it is, so messages keep its lines.
std::string as_children_read_it(const std::string& text, const std::string& source) {
  YAML::Node root = YamlReader{source}.load_mapping(text);
  auto security = root["security"];
  if (!security || !security.IsMap() || !security["curve"] || !security["curve"].IsScalar() ||
      security["curve"].Scalar() != "auto")
    return text;
  security.remove("curve");
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}
}  // namespace

void check_launch_config(const std::string& text, const std::string& source) {
  const auto children = as_children_read_it(text, source);
  const auto worker = worker::parse_worker_config(children, source);
  (void)server::parse_server_config(resolved_config_text(children, source), source);
  // The launcher starts every worker on this machine: a device it cannot have (worker.device:
  // cuda in a build without CUDA, or on a machine without a GPU) is refused before anything
  // starts, with the worker's own message.
  if (!worker.external) {
    try {
      for (const auto& region : worker.regions)
        worker::require_device_available(worker.device_in(region));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", source, e.what()));
    }
  }
}

}  // namespace geotrain::cli
