// The worker metrics events from Python (python/geotrain/torch.py): the writer and the events'
// fields as the native trainer builds them (worker/run/worker_events.hpp, worker/run/
// metrics_log.hpp), so that a Python leader's metrics file is the native leader's, line for line,
// and Python adds only the user's own fields. Bindings only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "core/metrics_events.hpp"
#include "json_dict.hpp"
#include "worker/config.hpp"
#include "worker/run/metrics_log.hpp"
#include "worker/run/worker_events.hpp"

namespace py = pybind11;

namespace geotrain::python {

void bind_events(py::module_& m) {
  py::class_<worker::MetricsLog>(m, "MetricsLog",
                                 "Appends events to one JSONL file, one per line with `event` and "
                                 "`time`, flushed per line; every line held to the events' schema "
                                 "(ValueError for an event or field it does not name, except the "
                                 "user's own fields in `step` and `eval`). One writer thread.")
      .def(py::init(
               [](const std::string& path) { return std::make_unique<worker::MetricsLog>(path); }),
           py::arg("path"))
      .def("seconds", &worker::MetricsLog::seconds, "seconds since the log was opened")
      .def(
          "write",
          [](worker::MetricsLog& log, const std::string& event, const py::dict& fields) {
            log.write_user(event, to_json(fields));
          },
          py::arg("event"), py::arg("fields"))
      .def("close", &worker::MetricsLog::close);
  m.def(
      "worker_metrics_path",
      [](const std::string& run_dir, const std::string& region, uint32_t rank) {
        return worker::worker_metrics_path(run_dir, region, rank).string();
      },
      py::arg("run_dir"), py::arg("region"), py::arg("rank") = 0,
      "<run_dir>/worker-<region>-<rank>.metrics.jsonl");
  m.def(
      "start_event",
      [](const std::string& config_text, const std::string& source, const std::string& region,
         uint32_t world, const std::string& model, size_t parameters, uint32_t fragments,
         uint32_t fragment_delay) {
        const auto c = worker::parse_worker_config(config_text, source);
        auto j = worker::start_event(c, region, 0, world, model, parameters, false, 0);
        // The servers' streaming layout, which the leader follows (its hellos), and the front end.
        j[events::field::fragments] = fragments;
        j[events::field::fragment_delay] = fragment_delay;
        j[events::field::frontend] = "python";
        return to_dict(j);
      },
      py::arg("config_text"), py::arg("source"), py::arg("region"), py::arg("world"),
      py::arg("model"), py::arg("parameters"), py::arg("fragments"), py::arg("fragment_delay"),
      "the `start` event of a Python leader of `region` (rank 0) as the native worker writes it "
      "from the same config, with the servers' fragments and `frontend`: python");
  m.def(
      "step_event",
      [](const std::string& region, uint64_t round, uint64_t step, double compute_s,
         std::optional<double> loss, uint32_t rank) {
        worker::StepFigures figures;
        figures.rank = rank;
        figures.round = round;
        figures.step = step;
        figures.loss = loss;
        figures.compute_s = compute_s;
        return to_dict(worker::step_event(region, figures));
      },
      py::arg("region"), py::arg("round"), py::arg("step"), py::arg("compute_s"),
      py::arg("loss") = std::nullopt, py::arg("rank") = 0,
      "a `step` event's fields (a leader of the Python API: no AllReduce of its own)");
  m.def(
      "round_event",
      [](const std::string& region, uint64_t round, uint32_t steps, double compute_s, double wait_s,
         const py::dict& exchanges) {
        return to_dict(worker::round_event(
            region, round, steps, {.compute_s = compute_s, .wait_s = wait_s}, to_json(exchanges)));
      },
      py::arg("region"), py::arg("round"), py::arg("steps"), py::arg("compute_s"),
      py::arg("wait_s"), py::arg("exchanges"),
      "a `round` event's fields: the round's times and its exchanges' (take_round_fields); steps "
      "0 for the exchanges that drain at the end of a run");
  m.def(
      "done_event",
      [](const std::string& region, uint64_t rounds, uint64_t steps, double wall_s) {
        return to_dict(worker::done_event(region, 0, rounds, steps, 0, wall_s));
      },
      py::arg("region"), py::arg("rounds"), py::arg("steps"), py::arg("wall_s"),
      "the `done` event's counts for a Python leader (rank 0; it skips no steps); the end "
      "figures come from end_figures()");
  m.def(
      "eval_event",
      [](const std::string& region, uint64_t round, uint64_t step) {
        return to_dict(worker::eval_event(region, round, step));
      },
      py::arg("region"), py::arg("round"), py::arg("step"),
      "an `eval` event's place; the figures are the caller's");
}

}  // namespace geotrain::python
