// The schedule every rank of a Python region follows, bound from the native worker's:
// geotrain.FragmentSchedule (worker/leader/fragment_schedule.hpp: when each streaming fragment is
// pushed and merged), MergeCalendar (the same in rounds of any length) and RoundBudget
// (worker/training/round_budget.hpp: the steps a time-budgeted round takes). Plain values; no
// network.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "round_position.hpp"
#include "worker/leader/fragment_schedule.hpp"
#include "worker/training/round_budget.hpp"

namespace py = pybind11;

namespace geotrain::python {

// The fragment schedule every rank of a Python region follows.
void bind_schedule(py::module_& m) {
  using worker::FragmentSchedule;
  py::class_<FragmentSchedule>(
      m, "FragmentSchedule",
      "when each streaming fragment is exchanged and merged "
      "(worker/leader/fragment_schedule.hpp): H local steps, P fragments, a "
      "merge `delay` steps after each push")
      .def(py::init([](uint32_t local_steps, uint32_t fragments, uint32_t delay) {
             if (local_steps < 1 || fragments < 1 || fragments > local_steps || delay > local_steps)
               throw py::value_error(fmt::format(
                   "local_steps {}, fragments {}, delay {}: allowed 1 <= fragments <= local_steps "
                   "and delay <= local_steps",
                   local_steps, fragments, delay));
             return FragmentSchedule{local_steps, fragments, delay};
           }),
           py::arg("local_steps"), py::arg("fragments"), py::arg("delay"))
      .def_readonly("local_steps", &FragmentSchedule::local_steps)
      .def_readonly("fragments", &FragmentSchedule::fragments)
      .def_readonly("delay", &FragmentSchedule::delay)
      .def("due", py::overload_cast<uint64_t, uint32_t>(&FragmentSchedule::due, py::const_),
           py::arg("step"), py::arg("fragment"),
           "whether fragment `fragment` is pushed after local step `step` (1-based)")
      .def("changes_after", &FragmentSchedule::changes_after, py::arg("step"),
           "whether a leader's exchanges change the parameters after local step `step` (a "
           "fragment due, or merged `delay` steps after one): when a region's other ranks take "
           "a broadcast");
  m.def(
      "changes_after",
      [](uint64_t step, uint32_t fragments, uint32_t local_steps, uint32_t delay) {
        return FragmentSchedule{local_steps, fragments, delay}.changes_after(step);
      },
      py::arg("step"), py::arg("fragments"), py::arg("local_steps"), py::arg("delay"),
      "FragmentSchedule(local_steps, fragments, delay).changes_after(step)");
  py::class_<worker::MergeCalendar>(
      m, "MergeCalendar",
      "changes_after() in rounds of any length (time-budgeted rounds): remembers the steps at "
      "which the pushes made so far are merged; one per rank, fed every step in order")
      .def(py::init<FragmentSchedule>(), py::arg("schedule"))
      .def("set_schedule", &worker::MergeCalendar::set_schedule, py::arg("schedule"))
      .def(
          "changes_after",
          [](worker::MergeCalendar& c, uint64_t step, uint32_t in_round, uint32_t round_steps) {
            check_position(in_round, round_steps);
            return c.changes_after(worker::StepPosition{step, in_round, round_steps});
          },
          py::arg("step"), py::arg("in_round"), py::arg("round_steps"),
          "whether the leader's exchanges change the parameters after local step `step` "
          "(1-based over the run), the `in_round`th of a round of `round_steps`");
  py::class_<worker::RoundBudget>(
      m, "RoundBudget",
      "how many local steps a time-budgeted round takes (worker/training/round_budget.hpp): the "
      "steps that fit in the budget at the pace of the round before, the rounding carried")
      .def(py::init([](double budget_s, uint32_t max_steps, uint32_t first_steps) {
             if (!(budget_s > 0) || max_steps < 1)
               throw py::value_error(fmt::format(
                   "RoundBudget: budget_s {} and max_steps {}: allowed budget_s > 0 and "
                   "max_steps >= 1",
                   budget_s, max_steps));
             return worker::RoundBudget(budget_s, max_steps, first_steps);
           }),
           py::arg("budget_s"), py::arg("max_steps"), py::arg("first_steps"))
      .def("record_step", &worker::RoundBudget::record_step, py::arg("seconds"),
           "one step of the round under way took `seconds`")
      .def("plan", &worker::RoundBudget::plan,
           "the next round's count, from the pace of the steps recorded since the last call")
      .def_property_readonly("pace_s", &worker::RoundBudget::pace_s);
}

}  // namespace geotrain::python
