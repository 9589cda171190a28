// The module functions a Python run needs besides geotrain.RegionSync (sync_bindings.cpp): the
// settings a leader reads from a deployment config, as the native worker's parser reads them; a
// config with overrides or a Python model's table applied; the metrics events' schema; and the
// model file writer. Bindings only: each calls the C++ the native binary uses.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "buffers.hpp"
#include "core/config_overrides.hpp"
#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/metrics_events_check.hpp"
#include "core/wan_profile.hpp"
#include "json_dict.hpp"
#include "models/model_spec.hpp"
#include "models/safetensors.hpp"
#include "worker/config.hpp"
#include "worker/config_keys.hpp"
#include "worker/run/final_model.hpp"

namespace py = pybind11;

namespace geotrain::python {

namespace {

// A tensor as Python hands it to the model writers: (name, shape, float32 array).
using NamedTensor = std::tuple<std::string, std::vector<uint64_t>, py::handle>;

// The tensors as safetensors views; `keep` holds the values (float_view may stage a copy).
std::vector<models::SafetensorView> safetensor_views(const std::vector<NamedTensor>& tensors,
                                                     std::vector<std::vector<float>>& keep) {
  keep.reserve(tensors.size());  // the views point into it
  std::vector<models::SafetensorView> views;
  for (const auto& [name, shape, values] : tensors) {
    auto v = float_view(values, false, name.c_str());
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    if (n != v.span.size())
      throw py::value_error(
          fmt::format("tensor {}: shape holds {} values, the array {}", name, n, v.span.size()));
    keep.emplace_back(v.span.begin(), v.span.end());
    views.push_back({name, shape, ConstFloatSpan(keep.back())});
  }
  return views;
}

// What a leader of `region` needs from a deployment config, as the native worker reads it: the
// `worker` section's effective values (worker/config_keys.hpp, a key per region as `region`'s),
// and the deployment's keys around it.
py::dict leader_settings(const std::string& yaml_text, const std::string& source,
                         const std::string& region) {
  const auto c = worker::parse_worker_config(yaml_text, source);
  c.region_index(region);  // InputError naming the allowed regions
  py::dict d = to_dict(worker::worker_settings(c, region));
  d["region"] = region;
  d["regions"] = c.regions;
  py::list servers;
  for (const auto& r : c.regions) servers.append(py::make_tuple(r, c.server_endpoint(region, r)));
  d["servers"] = servers;
  py::list tensors;
  // The servers' table: model.tensors, or the tensors of the native model the config names
  // (a torch model with geotrain's names, like examples/torch_gpt_kjv.py's GPT).
  std::vector<TensorSpec> specs = c.model.tensors;
  if (specs.empty() && (c.model.kind != "mlp" || !c.model.arch.empty()))
    specs = models::model_tensor_specs(c.model);
  for (const auto& t : specs) tensors.append(py::make_tuple(t.name, t.size));
  d["tensors"] = tensors;
  d["critical"] = c.model.critical;
  d["staleness_bound"] = c.staleness_bound;  // server.staleness_bound
  py::dict outer;  // server.optimizer, which the eager and delayed merges predict
  outer["lr"] = c.outer.lr;
  outer["momentum"] = c.outer.momentum;
  outer["nesterov"] = c.outer.nesterov;
  d["outer"] = outer;
  py::dict security;  // the top-level security section (curve: auto is refused by the parser)
  security["curve"] = c.security.curve_on();
  security["keys_dir"] = c.security.keys_dir.empty()
                             ? py::object(py::none())
                             : py::object(py::str(c.security.keys_dir.string()));
  d["security"] = security;
  return d;
}

// A dict of numeric figures ({"test_accuracy": 0.9}) as JSON numbers; ValueError for a value
// that is not a number.
nlohmann::json figures_json(const py::dict& d) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : d) {
    const auto name = py::str(key).cast<std::string>();
    if (!py::isinstance<py::float_>(value) && !py::isinstance<py::int_>(value))
      throw py::value_error(fmt::format("figure '{}' is not a number", name));
    j[name] = value.cast<double>();
  }
  return j;
}

// `yaml_text` with model.tensors (and model.critical, when given) replaced: the table of a model
// that only the Python side knows, for the servers.
// run.wan_profile is found as `geotrain run` finds it (core/wan_profile.hpp: a file relative to
// `config_dir` or the project's configs/, or a profile's name) and made absolute, so the result
// can be written anywhere; a profile that is not found is an error now, not at `geotrain serve`.
std::string with_model_tensors(const std::string& yaml_text,
                               const std::vector<std::pair<std::string, uint64_t>>& tensors,
                               const std::optional<std::vector<std::string>>& critical,
                               const std::string& config_dir) {
  YAML::Node root = YAML::Load(yaml_text);
  if (!root.IsMap()) throw py::value_error("the config is not a YAML mapping");
  resolve_wan_profile(root, config_dir, std::filesystem::path(GEOTRAIN_SOURCE_DIR) / "configs",
                      "the config");
  YAML::Node model = root["model"];
  if (!model || !model.IsMap()) model = YAML::Node(YAML::NodeType::Map);
  for (const auto& key : model_keys())  // the model's own keys: the tensors replace them
    if (key != "tensors" && key != "critical") model.remove(key);
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& [name, size] : tensors) {
    YAML::Node t(YAML::NodeType::Map);
    t.SetStyle(YAML::EmitterStyle::Flow);
    t["name"] = name;
    t["size"] = size;
    list.push_back(t);
  }
  model["tensors"] = list;
  if (critical) {
    YAML::Node globs(YAML::NodeType::Sequence);
    globs.SetStyle(YAML::EmitterStyle::Flow);
    for (const auto& g : *critical) globs.push_back(g);
    model["critical"] = globs;
  }
  root["model"] = model;
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

// `yaml_text` with `section.key=value` overrides applied (core/config_overrides.hpp), and the
// source that names them in errors: "<source> (with --set worker.lr=0.2)".
std::pair<std::string, std::string> with_overrides(const std::string& yaml_text,
                                                   const std::vector<std::string>& sets,
                                                   const std::string& source) {
  const auto overrides = parse_overrides(sets);
  return {apply_overrides(yaml_text, overrides, source), describe_source(source, overrides)};
}

// The schema of core/metrics_events.json, from the generated names.
py::dict metrics_events() {
  py::dict out;
  py::list common;
  for (const char* f : events::fields::common) common.append(f);
  out["common"] = common;
  for (const events::EventSpec& e : events::kEvents) {
    py::list fields;
    for (size_t i = 0; i < e.count; ++i) fields.append(e.fields[i]);
    py::dict spec;
    spec["fields"] = fields;
    spec["extensible"] = e.extensible;
    out[e.name] = spec;
  }
  return out;
}

}  // namespace

void bind_run(py::module_& m) {
  m.def(
      "write_safetensors",
      [](const std::string& path, const std::vector<NamedTensor>& tensors,
         const std::map<std::string, std::string>& metadata) {
        std::vector<std::vector<float>> keep;
        models::write_safetensors(path, safetensor_views(tensors, keep), metadata);
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "writes [(name, shape, float32 array), ...] as a safetensors file (models/safetensors.hpp: "
      "the layout `geotrain export-init` and the native run's model.safetensors use)");
  m.def(
      "write_global_model",
      [](const std::string& run_dir, const std::vector<NamedTensor>& tensors, uint64_t rounds) {
        std::vector<std::vector<float>> keep;
        const auto views = safetensor_views(tensors, keep);
        return worker::write_global_model(run_dir, rounds,
                                          [&](const std::filesystem::path& part,
                                              const std::map<std::string, std::string>& metadata) {
                                            models::write_safetensors(part, views, metadata);
                                          })
            .string();
      },
      py::arg("run_dir"), py::arg("tensors"), py::arg("rounds"),
      "writes [(name, shape, float32 array), ...] as <run_dir>/model.safetensors, the global "
      "model as the native leaders write it (worker/run/final_model.hpp); returns its path");
  m.def(
      "write_region_params",
      [](const std::string& run_dir, const std::string& region, py::handle flat) {
        const auto v = float_view(flat, false, "params");
        worker::write_region_params(run_dir, region, v.span);
      },
      py::arg("run_dir"), py::arg("region"), py::arg("params"),
      "writes a region's own final parameters (a float32 array in the table's order) to "
      "<run_dir>/params-<region>.f32, as the native leaders do");
  m.def(
      "end_figures",
      [](const py::dict& own, const py::object& global, const std::string& error) {
        std::optional<nlohmann::json> g;
        if (!global.is_none()) g = figures_json(global.cast<py::dict>());
        return to_dict(worker::end_figures(figures_json(own), g, error));
      },
      py::arg("own"), py::arg("global_figures"), py::arg("error") = "",
      "the done event's end figures as the native leaders write them (worker::end_figures): "
      "region_* of `own`, final_* of `global_figures` only when there is a global model (None: "
      "none), global_model, and global_model_error (`error`) without one");
  m.def("leader_settings", &leader_settings, py::arg("yaml_text"), py::arg("source"),
        py::arg("region"),
        "what a region's leader reads from a deployment config, parsed by the native worker's "
        "parser (same keys, defaults and errors)");
  m.def("with_model_tensors", &with_model_tensors, py::arg("yaml_text"), py::arg("tensors"),
        py::arg("critical") = py::none(), py::arg("config_dir") = "",
        "the config text with model.tensors set to [(name, size), ...] (and model.critical)");
  m.def("metrics_events", &metrics_events,
        "the worker metrics events' schema (core/metrics_events.json): {event: {'fields': [...], "
        "'extensible': bool}}, plus 'common': the fields of every event");
  m.def(
      "check_event",
      [](const std::string& name, const std::vector<std::string>& keys, bool strict) {
        return events::check(name, keys, strict);
      },
      py::arg("event"), py::arg("keys"), py::arg("strict") = true,
      "what is wrong with an event of these field names against the schema ('' when nothing)");
  m.def("with_overrides", &with_overrides, py::arg("yaml_text"), py::arg("sets"), py::arg("source"),
        "(text, source): the config text with `section.key=value` overrides applied (the value "
        "is YAML; JSON is YAML), as `geotrain run --set` applies them, and the source that names "
        "them in errors");
}

}  // namespace geotrain::python
