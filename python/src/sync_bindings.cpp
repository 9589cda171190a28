// geotrain.RegionSync: a region leader's link to every region's server, binding
// worker/leader/region_sync.hpp, driven by worker/leader/streaming_sync.hpp (overlap modes,
// fragments) as in the native trainer (worker/leader/leader_session.hpp), planned from the
// deployment config by the native worker's parser (RegionSync.from_config) or from Python
// arguments, so that a Python leader and a C++ leader of the same config talk to the same servers
// with the same settings; and the fragment schedule every rank follows. The config helpers are in
// run_bindings.cpp.
//
// Owns its ZeroMQ context, the parameter table's layout and the RegionSync; calls block on the
// network with the GIL released. One Python thread at a time per object.
//
// CURVE (docs/deploy.md): with `keys_dir` (or the config's security section, read by OuterSync)
// every server link is a CURVE client with this region's client keypair. connect() first checks
// that every server completes the handshake (wire/handshake_check.hpp): a server that refuses
// this client (no keys, wrong keys, CURVE on one side only) raises geotrain.HandshakeError
// (a ConnectionError) naming the server and the reason at once, instead of a timeout.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

#include "buffers.hpp"
#include "core/error.hpp"
#include "core/param_table.hpp"
#include "json_dict.hpp"
#include "round_position.hpp"
#include "wire/context.hpp"
#include "wire/handshake_check.hpp"
#include "wire/security_config.hpp"
#include "worker/config.hpp"
#include "worker/leader/leader_config.hpp"
#include "worker/leader/leader_session.hpp"
#include "worker/leader/overlap_merge.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/streaming_sync.hpp"
#include "worker/run/final_model.hpp"
#include "worker/run/metrics_log.hpp"
#include "worker/run/worker_events.hpp"

namespace geotrain::python {

namespace {

using worker::OverlapMode;
using worker::RoundReport;
using worker::StreamingConfig;
using worker::StreamingSync;
using worker::SyncConfig;

py::dict report_dict(const RoundReport& r) { return to_dict(worker::report_fields(r)); }

py::list report_list(const std::vector<RoundReport>& reports) {
  py::list out;
  for (const auto& r : reports) out.append(report_dict(r));
  return out;
}

// A refused connection (wire/handshake_check.hpp): geotrain.HandshakeError in Python.
struct HandshakeRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a region's leader runs on: its link to the servers and the streaming schedule.
struct LeaderPlan {
  SyncConfig sync;
  StreamingConfig streaming;
};

// The leader's settings from the worker's config, as the native trainer builds them
// (worker/leader/leader_config.hpp). Not tokens_per_round, which a Python leader does not know (0:
// weighted like every delta).
LeaderPlan leader_plan(const worker::WorkerConfig& c, const std::string& region) {
  return {worker::leader_sync_config(c, region, /*tokens_per_round=*/0),
          worker::leader_streaming_config(c, region)};
}

// One leader's state: a worker::LeaderSession (the round logic, as the native trainer's) over
// this object's table and context. Members are destroyed in reverse: the session (its streaming
// thread, then its RegionSync's sockets), the table it borrows, and last the context.
class RegionLeader {
 public:
  RegionLeader(const std::vector<TensorSpec>& tensors, const std::vector<std::string>& critical,
               LeaderPlan plan, wire::SecurityConfig security)
      : table_(tensors, critical),
        session_(std::make_unique<worker::LeaderSession>(table_, std::move(plan.sync),
                                                         plan.streaming, context_)),
        security_(std::move(security)) {}

  ~RegionLeader() {
    py::gil_scoped_release nogil;  // the streaming thread may be finishing an exchange
    session_.reset();
  }

  uint64_t connect(const py::handle& origin) {
    if (!origin.is_none()) {
      auto v = float_view(origin, false, "origin");
      session_->sync().set_origin(v.span);
    }
    py::gil_scoped_release nogil;
    require_handshakes();
    // InputError (ValueError) for a delay beyond H or fragments that are not the servers'.
    return session_->connect();
  }

  // After local step `step` (1-based over the whole run), in place on `local` (the flat
  // parameters): StreamingSync::after_step. Returns the reports of the exchanges merged.
  // With `round_steps` > 0, in a round of that many steps, the step being its `in_round`th
  // (time-budgeted rounds: StepPosition); 0: rounds of H steps.
  py::list after_step(uint64_t step, const py::handle& local, uint32_t in_round,
                      uint32_t round_steps) {
    require_training();
    if (round_steps > 0) check_position(in_round, round_steps);
    auto v = float_view(local, true, "local");
    std::vector<RoundReport> reports;
    {
      py::gil_scoped_release nogil;
      reports = round_steps > 0 ? session_->after_step(
                                      worker::StepPosition{step, in_round, round_steps}, v.span)
                                : session_->after_step(step, v.span);
    }
    return report_list(reports);
  }

  py::list finish(uint64_t last_step, const py::handle& local, bool flush_follows) {
    require_training();
    auto v = float_view(local, true, "local");
    std::vector<RoundReport> reports;
    {
      py::gil_scoped_release nogil;
      reports = session_->finish(last_step, v.span,
                                 flush_follows ? worker::RunEnd::flush : worker::RunEnd::no_flush);
    }
    finished_ = true;
    return report_list(reports);
  }

  // The `round` event's exchange fields of every exchange merged since the last call (after_step
  // and finish), as the native trainer writes them (worker::exchange_fields); {} when none.
  py::dict take_round_fields() { return to_dict(session_->take_round_fields()); }

  // The `tensor_motion` event (worker::motion_event): how far each tensor moved in the pulls so
  // far, in the table's order.
  py::dict tensor_motion_event() const {
    return to_dict(worker::motion_event(region(), session_->sync().motion()));
  }

  // The end of a run, after finish() (worker::flush_to_global, as the native leaders): `local`
  // becomes the global model (the mean of what the regions hold), or, when the flush fails (a
  // server that does not answer or lacks the flush), stays as it was. Returns the `flush` event.
  py::dict flush(const py::handle& local) {
    require_connected();
    auto v = float_view(local, true, "local");
    const std::vector<float> own(v.span.begin(), v.span.end());
    worker::FlushOutcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome = worker::flush_to_global(*session_, v.span, own, region());
    }
    flushed_ = outcome.global();
    return to_dict(outcome.event);
  }

  // The end of the region's exchange, as the native leaders end it (worker::end_exchange): what
  // is in flight merged into `local`, the `round` (drained exchanges, or the caller's unlogged
  // merges up to `unlogged_round`), `tensor_motion` and `flush` events into `log` (None: not
  // logged), with `flush_follows` the flush (`local` becomes the global model, or stays the
  // region's own), and the goodbye. Returns {"reports", "global_model", "error"}.
  py::dict end(uint64_t last_step, const py::handle& local, bool flush_follows,
               worker::MetricsLog* log, std::optional<uint64_t> unlogged_round, int64_t wait_ms) {
    require_training();
    auto v = float_view(local, true, "local");
    worker::ExchangeEnd end;
    {
      py::gil_scoped_release nogil;
      end = worker::end_exchange(
          *session_, last_step, v.span, flush_follows, region(), std::chrono::milliseconds(wait_ms),
          [log](const std::string& name, nlohmann::json fields) {
            if (log != nullptr) log->write(name, std::move(fields));
          },
          unlogged_round);
    }
    finished_ = true;
    flushed_ = end.flush.global();
    py::dict out;
    out["reports"] = report_list(end.reports);
    out["global_model"] = end.flush.global();
    out["error"] = end.flush.global() ? py::object(py::none()) : py::str(end.flush.error);
    return out;
  }

  void copy_base(const py::handle& out) {
    auto v = float_view(out, true, "out");
    const auto base = session_->sync().base();
    if (v.span.size() != base.size())
      throw py::value_error(
          fmt::format("out has {} elements, the table has {}", v.span.size(), base.size()));
    std::copy(base.begin(), base.end(), v.span.begin());
  }

  const ParamTable& table() const { return table_; }
  uint64_t next_round() const { return session_->sync().next_round(); }
  const StreamingConfig& streaming() const { return session_->streaming_config(); }
  const SyncConfig& sync_config() const { return session_->sync().config(); }
  // The region leaves (RegionSync::goodbye): best effort, at most `wait_ms` per server.
  void goodbye(int64_t wait_ms) {
    py::gil_scoped_release nogil;
    finished_ = true;
    session_->goodbye(std::chrono::milliseconds(wait_ms));
  }
  bool curve() const { return security_.curve_on(); }

 private:
  // Every server completes the handshake (CURVE or not) within the timeout, or connect() fails
  // now: HandshakeRefused with every refusal's reason, or a RuntimeError naming the servers that
  // did not answer (the error connect() would give after the same wait).
  void require_handshakes() {
    const auto& c = session_->sync().config();
    std::vector<wire::HandshakeTarget> targets;
    for (const auto& s : c.servers)
      targets.push_back({"the server of region " + s.region, s.endpoint, s.curve});
    const auto results = wire::check_handshakes(context_, targets, c.timeout);
    std::string refused, silent;
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& t = targets[i];
      if (results[i].outcome == wire::HandshakeOutcome::refused)
        refused += fmt::format("\n  {} at {}: {}", t.name, t.endpoint, results[i].reason);
      else if (results[i].outcome == wire::HandshakeOutcome::no_answer)
        silent += fmt::format("{}{} at {}", silent.empty() ? "" : ", ", t.name, t.endpoint);
    }
    const std::string mine = security_.curve_on()
                                 ? fmt::format("CURVE with region {}'s client keys from {}",
                                               c.region, security_.keys_dir.string())
                                 : std::string("no CURVE (no keys given)");
    if (!refused.empty())
      throw HandshakeRefused(fmt::format(
          "region {} was refused by the servers (this client: {}):{}", c.region, mine, refused));
    if (!silent.empty())
      throw std::runtime_error(fmt::format(
          "region {}: no connection to {} within {} ms (is it running, is the endpoint right?)",
          c.region, silent, c.timeout.count()));
  }

  const std::string& region() const { return session_->sync().config().region; }
  void require_connected() const {
    if (flushed_) throw py::value_error("RegionSync: flush() ended the run: no exchange after it");
    if (!session_->connected() && !finished_) throw py::value_error("RegionSync: connect() first");
  }
  // after_step and finish: connected, and training not finished.
  void require_training() const {
    require_connected();
    if (finished_) throw py::value_error("RegionSync: finish() ended training: no step after it");
  }

  wire::Context context_;
  ParamTable table_;
  std::unique_ptr<worker::LeaderSession> session_;
  bool finished_ = false;  // finish() or goodbye(): the schedule has stopped
  bool flushed_ = false;
  wire::SecurityConfig security_;
};

// The other way; InputError (ValueError) naming `key` and the phase on a bad schedule.
compression::CodecSchedule schedule_from_py(const py::object& o, const std::string& key) {
  if (py::isinstance<py::str>(o)) return compression::CodecSchedule(o.cast<std::string>());
  GT_REQUIRE(py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o),
             "{} must be a codec spec or a list of phases {{until_round, codec}}", key);
  std::vector<compression::CodecPhase> phases;
  size_t i = 0;
  for (const auto& item : o) {
    GT_REQUIRE(py::isinstance<py::dict>(item), "{}[{}] must be a dict {{until_round, codec}}", key,
               i);
    const auto d = py::reinterpret_borrow<py::dict>(item);
    for (const auto& kv : d) {
      const auto name = py::str(kv.first).cast<std::string>();
      GT_REQUIRE(name == "until_round" || name == "codec",
                 "{}[{}] has an unknown key '{}' (allowed: codec, until_round)", key, i, name);
    }
    GT_REQUIRE(d.contains("codec"), "{}[{}] has no codec", key, i);
    compression::CodecPhase phase;
    phase.codec = py::str(d["codec"]).cast<std::string>();
    if (d.contains("until_round") && !d["until_round"].is_none())
      phase.until_round = d["until_round"].cast<uint64_t>();
    phases.push_back(std::move(phase));
    ++i;
  }
  return compression::CodecSchedule::from_phases(std::move(phases), key);
}

// worker.overlap as Python passes it: a bool, or "false" / "true" / "eager" / "delayed".
OverlapMode overlap_from_py(const py::object& overlap) {
  return py::isinstance<py::bool_>(overlap)
             ? (overlap.cast<bool>() ? OverlapMode::carry : OverlapMode::off)
             : worker::parse_overlap_mode(py::str(overlap).cast<std::string>());
}

// Steps from a fragment's push to its merge, as the native worker computes it
// (WorkerConfig::merge_delay): every rank of a Python region needs it for the schedule.
uint32_t merge_delay(uint32_t local_steps, uint32_t fragments, const py::object& overlap,
                     std::optional<uint32_t> fragment_delay) {
  return worker::FragmentSchedule::merge_delay(overlap_from_py(overlap), local_steps, fragments,
                                               fragment_delay);
}

// The table a Python leader keeps: (name, size) in order, and each tensor's matrix columns
// (its last dimension when it has two or more; 0 otherwise; empty: none known), which powersgd
// needs. ValueError when the two lists differ in length or a size is not rows of its columns.
std::vector<TensorSpec> table_specs(const std::vector<std::pair<std::string, uint64_t>>& tensors,
                                    const std::vector<uint64_t>& matrix_cols) {
  if (!matrix_cols.empty() && matrix_cols.size() != tensors.size())
    throw py::value_error(fmt::format("matrix_cols has {} entries for {} tensors",
                                      matrix_cols.size(), tensors.size()));
  std::vector<TensorSpec> specs;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const uint64_t cols = matrix_cols.empty() ? 0 : matrix_cols[t];
    if (cols != 0 && tensors[t].second % cols != 0)
      throw py::value_error(fmt::format("tensor '{}' of {} elements is not rows of {} columns",
                                        tensors[t].first, tensors[t].second, cols));
    specs.push_back({tensors[t].first, tensors[t].second, cols});
  }
  return specs;
}

// A RegionSync from the Python arguments (documented on the class): they become the worker's
// config, so the leader is planned exactly as the native trainer plans it.
std::unique_ptr<RegionLeader> make_region_leader(
    const std::vector<std::pair<std::string, uint64_t>>& tensors,
    const std::vector<std::string>& critical, const std::string& region,
    const std::vector<std::pair<std::string, std::string>>& servers,
    const py::object& critical_codec, const py::object& noncritical_codec, uint32_t staleness_bound,
    const py::object& overlap, int64_t timeout_ms, uint32_t local_steps, uint32_t fragments,
    std::optional<uint32_t> fragment_delay, float outer_lr, float outer_momentum,
    bool outer_nesterov, const py::object& keys_dir, bool stream_critical,
    const std::string& chunk_align, uint32_t streams_per_server, double link_mbps,
    uint32_t socket_buffer_kib, float error_feedback_decay, const py::object& shard_wait_ms,
    const std::vector<uint64_t>& matrix_cols) {
  if (streams_per_server > 64)
    throw py::value_error(fmt::format(
        "streams_per_server is {}, allowed: 1..64, or 0 for auto (worker.streams_per_server)",
        streams_per_server));
  if (chunk_align != "segment" && chunk_align != "tensor")
    throw py::value_error(fmt::format(
        "chunk_align is '{}', allowed: segment, tensor (worker.chunk_align)", chunk_align));
  if (local_steps < 1 || fragments < 1)
    throw py::value_error(fmt::format("local_steps is {} and fragments {}: both must be at least 1",
                                      local_steps, fragments));
  if (timeout_ms < 1)
    throw py::value_error(fmt::format("timeout_ms is {}, must be positive", timeout_ms));
  if (!(error_feedback_decay > 0.0f && error_feedback_decay <= 1.0f))
    throw py::value_error(
        fmt::format("error_feedback_decay is {}, allowed: (0, 1] (worker.error_feedback.decay)",
                    error_feedback_decay));
  const bool shard_wait_auto =
      py::isinstance<py::str>(shard_wait_ms) && shard_wait_ms.cast<std::string>() == "auto";
  if (!shard_wait_auto &&
      (!py::isinstance<py::int_>(shard_wait_ms) || shard_wait_ms.cast<int64_t>() < 0))
    throw py::value_error(fmt::format(
        "shard_wait_ms is {}, must be 0 (never defer), positive, or 'auto' (worker.shard_wait_ms)",
        py::repr(shard_wait_ms).cast<std::string>()));
  const std::vector<TensorSpec> specs = table_specs(tensors, matrix_cols);
  // The arguments as the worker's config: the endpoints given are the ones this
  // region dials (routes already applied), so they are server.endpoints.
  worker::WorkerConfig w;
  for (const auto& [r, endpoint] : servers) {
    w.regions.push_back(r);
    w.server_endpoints[r] = endpoint;
  }
  w.critical_codec = schedule_from_py(critical_codec, "critical_codec");
  w.noncritical_codec = schedule_from_py(noncritical_codec, "noncritical_codec");
  w.tensor_segments = chunk_align == "tensor";
  w.staleness_bound = staleness_bound;
  w.timeout = std::chrono::milliseconds(timeout_ms);
  w.streams_per_server = streams_per_server;
  w.link_mbps = link_mbps;
  w.socket_buffer_kib = socket_buffer_kib;
  w.error_feedback_decay = error_feedback_decay;
  w.shard_wait_auto = shard_wait_auto;
  w.shard_wait = shard_wait_auto
                     ? std::min(worker::WorkerConfig::kAutoShardWaitStart, w.timeout / 2)
                     : std::chrono::milliseconds(shard_wait_ms.cast<int64_t>());
  w.overlap_mode = overlap_from_py(overlap);
  w.overlap = w.overlap_mode != OverlapMode::off;
  w.local_steps = local_steps;
  w.fragments = fragments;
  w.fragment_delay = fragment_delay;
  w.stream_critical = stream_critical;
  w.outer = {outer_lr, outer_momentum, outer_nesterov};
  if (!keys_dir.is_none()) {  // CURVE on, keys as `geotrain keygen` wrote them
    w.security.curve = wire::CurveSetting::on;
    w.security.keys_dir = py::str(keys_dir).cast<std::string>();
    if (w.security.keys_dir.empty()) throw py::value_error("keys_dir is empty (None: no CURVE)");
    if (!wire::curve_supported())
      throw py::value_error(
          "keys_dir is given, but this libzmq was built without CURVE (libsodium)");
  }
  auto plan = leader_plan(w, region);  // reads the key files: ValueError naming one
  return std::make_unique<RegionLeader>(specs, critical, std::move(plan), w.security);
}

// A RegionSync planned from a deployment config's text exactly as the native worker plans its
// leader (parse_worker_config, then leader_plan): OuterSync's path, so that every key that shapes
// the leader reaches it without a copy here. `tensors` is the Python model's table; the critical
// globs are the config's model.critical.
std::unique_ptr<RegionLeader> region_leader_from_config(
    const std::vector<std::pair<std::string, uint64_t>>& tensors, const std::string& yaml_text,
    const std::string& source, const std::string& region,
    const std::vector<uint64_t>& matrix_cols) {
  const auto w = worker::parse_worker_config(yaml_text, source);
  const std::vector<TensorSpec> specs = table_specs(tensors, matrix_cols);
  auto plan = leader_plan(w, region);  // InputError naming the regions, or a key file
  return std::make_unique<RegionLeader>(specs, w.model.critical, std::move(plan), w.security);
}

// RegionSync's end of training: finish, the round fields and tensor motion it logs, the flush,
// end (all of it as the native leaders do it) and goodbye.
void bind_run_end(py::class_<RegionLeader>& leader) {
  leader
      .def("finish", &RegionLeader::finish, py::arg("last_step"), py::arg("local"),
           py::arg("flush_follows") = false,
           "the end of training after `last_step`: merges what is in flight and exchanges every "
           "fragment pushed before the last step; returns the reports merged. With "
           "flush_follows, deferred shards still on the WAN are left to flush(), which must "
           "follow (it sends them last, so that two regions never wait for each other's last "
           "push)")
      .def("take_round_fields", &RegionLeader::take_round_fields,
           "the round event's exchange fields (bytes, seconds, staleness, merged_round, ...) of "
           "every exchange merged since the last call, as the native trainer writes them; {} when "
           "none")
      .def("tensor_motion_event", &RegionLeader::tensor_motion_event,
           "the tensor_motion event: each tensor's name, elements, critical and relative_update "
           "(the RMS size of a pull's change against the tensor's), over the pulls so far")
      .def("flush", &RegionLeader::flush, py::arg("local"),
           "the end of a run, after finish(): pushes the progress not pushed yet (fp32), waits "
           "for every live region's flush and pulls the global model into `local` (in place); "
           "returns the `flush` event (global_model false, with the error, when it failed: "
           "`local` is then unchanged). No exchange after it")
      .def("end", &RegionLeader::end, py::arg("last_step"), py::arg("local"),
           py::arg("flush_follows"), py::arg("log") = py::none(),
           py::arg("unlogged_round") = py::none(), py::arg("wait_ms") = 2000,
           "the end of the exchange as the native leaders end it: finish, the events that close "
           "the run's exchanges (into `log`, a MetricsLog, when given), the flush when "
           "`flush_follows` (the global model into `local`), and goodbye; returns {reports, "
           "global_model, error}")
      .def("goodbye", &RegionLeader::goodbye, py::arg("wait_ms") = 2000,
           "the region leaves: every server stops counting it at once (best effort, at most "
           "wait_ms per server); last, after flush()");
}

// RegionSync's views: the global values it holds, its settings and its table.
void bind_views(py::class_<RegionLeader>& leader) {
  leader
      .def("copy_base", &RegionLeader::copy_base, py::arg("out"),
           "out[:] = the newest global parameters this region has received")
      .def_property_readonly("next_round", &RegionLeader::next_round)
      .def_property_readonly("curve", &RegionLeader::curve)
      .def_property_readonly("overlap",
                             [](const RegionLeader& l) {
                               return std::string(worker::overlap_mode_name(l.streaming().mode));
                             })
      .def_property_readonly("fragments",
                             [](const RegionLeader& l) { return l.streaming().fragments; })
      .def_property_readonly("fragment_delay",
                             [](const RegionLeader& l) { return l.streaming().delay; })
      .def_property_readonly(
          "error_feedback_decay",
          [](const RegionLeader& l) { return l.sync_config().error_feedback_decay; })
      .def_property_readonly("shard_wait_ms",
                             [](const RegionLeader& l) -> py::object {
                               if (l.sync_config().shard_wait_auto) return py::str("auto");
                               return py::int_(l.sync_config().shard_wait.count());
                             })
      .def_property_readonly(
          "schedule", [](const RegionLeader& l) { return l.streaming().schedule(); },
          "the FragmentSchedule this region follows (after connect(): with the servers' count)")
      .def_property_readonly("layout_hash",
                             [](const RegionLeader& l) { return l.table().layout_hash(); })
      .def_property_readonly("size",
                             [](const RegionLeader& l) { return l.table().total_elements(); })
      .def_property_readonly("tensors", [](const RegionLeader& l) {
        py::list out;
        for (const auto& t : l.table().tensors())
          out.append(py::make_tuple(t.name, t.offset, t.size, t.critical));
        return out;
      });
  ;
}

}  // namespace

void bind_sync(py::module_& m) {
  py::register_exception<HandshakeRefused>(m, "HandshakeError", PyExc_ConnectionError);
  py::class_<RegionLeader> leader(m, "RegionSync", R"doc(
A region leader's exchange with every region's server: the C++ LeaderSession (RegionSync
driven by StreamingSync) that the native trainer uses (worker.overlap modes, worker.fragments). Parameters are
one flat float32 array in the table's order. Usually used through geotrain.torch.OuterSync.

  tensors   [(name, size), ...]: the table, as the servers' model.tensors; matrix_cols: each
             tensor's last dimension when it has two or more, else 0 (a codec that factorises
             matrices, powersgd, needs them; empty: none is a matrix)
  critical  globs of the tensors exchanged synchronously (model.critical)
  region    this region's name; servers: [(region, endpoint), ...] for every region
  critical_codec, noncritical_codec: codec specs, or schedules of them by round,
             [{"until_round": 10, "codec": "int8"}, {"codec": "onebit"}] (rounds counted from 1;
             a phase covers its until_round; error feedback always on, kept at a switch)
  chunk_align: "segment" (default) or "tensor": one segment per tensor, so that codec chunks
             restart at each tensor boundary (worker.chunk_align)
  streams_per_server: connections to each server, messages striped over them; 0: auto, from
             the measured round trip, link_mbps and the TCP window (worker.streams_per_server);
             socket_buffer_kib: SO_SNDBUF/SO_RCVBUF, 0: the OS default
  error_feedback_decay: the uplink residual's decay, e <- decay * e + delta before encoding
             (worker.error_feedback.decay; 1: none); shard_wait_ms: with overlap, how long an
             exchange waits for a server before its shards are deferred (worker.shard_wait_ms;
             0: never; "auto": twice the 90th percentile of the region's healthy exchanges)
  staleness_bound: rounds this region may run ahead of the slowest (server.staleness_bound)
  local_steps: H; overlap: False/True/"false"/"true"/"eager"/"delayed" (worker.overlap)
  fragments: P (worker.fragments; connect() takes the servers' count instead where they say
             another, see the `fragments` property); fragment_delay: steps from a fragment's
             push to its merge (None: H / P with overlap, 0 without, following that P)
  outer_lr, outer_momentum, outer_nesterov: the servers' outer optimizer (server.optimizer),
             which the eager and delayed merges predict
  keys_dir   CURVE: the folder `geotrain keygen` wrote (security.keys_dir); this region's client
             keypair and every server's public key are read from it. None: no CURVE.
connect() raises HandshakeError (a ConnectionError) when a server refuses the connection
(no keys, wrong keys, CURVE on one side only), naming the server and the reason.
)doc");
  leader
      .def_static("from_config", &region_leader_from_config, py::arg("tensors"),
                  py::arg("yaml_text"), py::arg("source"), py::arg("region"),
                  py::arg("matrix_cols") = std::vector<uint64_t>{},
                  "the leader of `region` planned from a deployment config's text as the native "
                  "worker plans its own (every worker and shared key read by the same parser); "
                  "`tensors` [(name, size)] is the model's table, `matrix_cols` each tensor's "
                  "last dimension when it has two or more, else 0 (for powersgd)")
      .def(py::init(&make_region_leader), py::arg("tensors"), py::arg("critical"),
           py::arg("region"), py::arg("servers"), py::arg("critical_codec") = "fp32",
           py::arg("noncritical_codec") = "fp32", py::arg("staleness_bound") = 0,
           py::arg("overlap") = false, py::arg("timeout_ms") = 120000, py::arg("local_steps") = 1,
           py::arg("fragments") = 1, py::arg("fragment_delay") = py::none(),
           py::arg("outer_lr") = 1.0f, py::arg("outer_momentum") = 0.0f,
           py::arg("outer_nesterov") = false, py::arg("keys_dir") = py::none(),
           py::arg("stream_critical") = true, py::arg("chunk_align") = "segment",
           py::arg("streams_per_server") = 0, py::arg("link_mbps") = 1000.0,
           py::arg("socket_buffer_kib") = 0, py::arg("error_feedback_decay") = 1.0f,
           py::arg("shard_wait_ms") = py::int_(0), py::arg("matrix_cols") = std::vector<uint64_t>{})
      .def("connect", &RegionLeader::connect, py::arg("origin") = py::none(),
           "register with every server and pull the global values; origin: the common initial "
           "parameters (the servers hold the sum of deltas from it). Returns the next round")
      .def("after_step", &RegionLeader::after_step, py::arg("step"), py::arg("local"),
           py::arg("in_round") = 0, py::arg("round_steps") = 0,
           "after local step `step` (1-based over the run: (round - 1) * H + h + 1), in place on "
           "the flat parameters: merges the exchanges due, starts the fragments due; returns "
           "the merged exchanges' reports (a list of dicts, often empty). Time-budgeted rounds: "
           "round_steps, the round's count, and in_round, the step's place in it (1-based)");
  bind_run_end(leader);
  bind_views(leader);
  m.def("merge_delay", &merge_delay, py::arg("local_steps"), py::arg("fragments"),
        py::arg("overlap"), py::arg("fragment_delay") = py::none(),
        "steps from a fragment's push to its merge, as the native worker computes it");
}

}  // namespace geotrain::python
