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
#include "models/model_spec.hpp"
#include "models/safetensors.hpp"
#include "worker/config.hpp"
#include "worker/leader/overlap_merge.hpp"

namespace py = pybind11;

namespace geotrain::python {

namespace {

// A codec schedule as Python holds it (compression/codec_schedule.hpp): the spec string for one
// phase, else [{"until_round": N, "codec": SPEC}, ..., {"codec": SPEC}], as the YAML writes it.
py::object schedule_to_py(const compression::CodecSchedule& s) {
  if (!s.scheduled()) return py::str(s.phases().front().codec);
  py::list phases;
  for (const auto& p : s.phases()) {
    py::dict d;
    if (p.until_round) d["until_round"] = *p.until_round;
    d["codec"] = p.codec;
    phases.append(d);
  }
  return phases;
}

// What a leader of `region` needs from a deployment config, as the native worker reads it.
py::dict leader_settings(const std::string& yaml_text, const std::string& source,
                         const std::string& region) {
  const auto c = worker::parse_worker_config(yaml_text, source);
  c.region_index(region);  // InputError naming the allowed regions
  py::dict d;
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
  d["critical_codec"] = schedule_to_py(c.critical_codec);
  d["noncritical_codec"] = schedule_to_py(c.noncritical_codec);
  d["chunk_align"] = c.tensor_segments ? "tensor" : "segment";  // worker.chunk_align
  py::dict feedback;                                            // worker.error_feedback
  feedback["decay"] = c.error_feedback_decay;
  d["error_feedback"] = feedback;
  d["staleness_bound"] = c.staleness_bound;
  d["overlap"] = std::string(worker::overlap_mode_name(c.overlap_mode));  // false|true|eager|...
  d["fragments"] = c.fragments;
  d["stream_critical"] = c.stream_critical;
  // As written (None: the default, H / P with overlap, 0 without; OuterSync derives it).
  d["fragment_delay"] = c.fragment_delay ? py::object(py::int_(*c.fragment_delay)) : py::none();
  py::dict outer;  // server.optimizer, which the eager and delayed merges predict
  outer["lr"] = c.outer.lr;
  outer["momentum"] = c.outer.momentum;
  outer["nesterov"] = c.outer.nesterov;
  d["outer"] = outer;
  d["local_steps"] = c.local_steps;
  d["round_time_ms"] = c.round_time_ms;  // time-budgeted rounds (0: none)
  d["max_local_steps"] = c.max_local_steps;
  d["rounds"] = c.rounds;
  d["workers_per_region"] = c.workers.in(region);  // the leader's region's
  d["batch_size"] = c.batch_size.in(region);       // the leader's region's
  d["lr"] = c.lr;
  d["seed"] = c.seed;
  d["eval_every"] = c.eval_every;
  d["timeout_ms"] = c.timeout.count();
  if (c.shard_wait_auto)
    d["shard_wait_ms"] = "auto";
  else
    d["shard_wait_ms"] = c.shard_wait.count();
  d["streams_per_server"] = c.streams_per_server;  // 0: auto
  d["link_mbps"] = c.link_mbps;
  d["socket_buffer_kib"] = c.socket_buffer_kib;
  d["run_dir"] = c.run_dir.string();
  d["external"] = c.external;
  py::dict security;  // the top-level security section (curve: auto is refused by the parser)
  security["curve"] = c.security.curve_on();
  security["keys_dir"] = c.security.keys_dir.empty()
                             ? py::object(py::none())
                             : py::object(py::str(c.security.keys_dir.string()));
  d["security"] = security;
  // The local training settings, for a Python loop that wants to train like the native worker.
  py::dict opt;
  opt["kind"] = worker::optimizer_kind_name(c.optimizer.kind);
  opt["momentum"] = c.optimizer.momentum;
  opt["nesterov"] = c.optimizer.nesterov;
  opt["weight_decay"] = c.optimizer.weight_decay;
  opt["beta1"] = c.optimizer.beta1;
  opt["beta2"] = c.optimizer.beta2;
  opt["eps"] = c.optimizer.eps;
  opt["no_decay"] = c.optimizer.no_decay;
  opt["muon_lr"] = c.optimizer.muon_lr;
  opt["muon_momentum"] = c.optimizer.muon_momentum;
  opt["muon_nesterov"] = c.optimizer.muon_nesterov;
  opt["muon_ns_steps"] = c.optimizer.muon_ns_steps;
  opt["adamw_tensors"] = c.optimizer.adamw_tensors;
  d["optimizer"] = opt;
  d["warmup_steps"] = c.warmup_steps;
  d["lr_decay"] = c.decay == worker::LrDecay::kCosine   ? "cosine"
                  : c.decay == worker::LrDecay::kCyclic ? "cyclic"
                                                        : "constant";
  if (c.decay == worker::LrDecay::kCyclic) {
    py::dict cycle;
    cycle["period"] = c.lr_cycle_steps;
    cycle["multiplier"] = c.lr_cycle_mult;
    d["lr_cycle"] = cycle;
  }
  d["min_lr"] = c.min_lr;
  d["max_grad_norm"] = c.max_grad_norm;
  py::dict data;
  data["kind"] = c.data.kind;
  data["path"] = c.data.path.string();
  data["validation_fraction"] = c.data.validation_fraction;
  data["eval_windows"] = c.data.eval_windows;
  d["data"] = data;
  return d;
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
      [](const std::string& path,
         const std::vector<std::tuple<std::string, std::vector<uint64_t>, py::handle>>& tensors,
         const std::map<std::string, std::string>& metadata) {
        std::vector<std::vector<float>> keep;  // float_view may stage a copy; hold it
        std::vector<models::SafetensorView> views;
        for (const auto& [name, shape, values] : tensors) {
          auto v = float_view(values, false, name.c_str());
          uint64_t n = 1;
          for (auto d : shape) n *= d;
          if (n != v.span.size())
            throw py::value_error(fmt::format("tensor {}: shape holds {} values, the array {}",
                                              name, n, v.span.size()));
          keep.emplace_back(v.span.begin(), v.span.end());
          views.push_back({name, shape, ConstFloatSpan(keep.back())});
        }
        models::write_safetensors(path, views, metadata);
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "writes [(name, shape, float32 array), ...] as a safetensors file (models/safetensors.hpp: "
      "the layout `geotrain export-init` and the native run's model.safetensors use)");
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
