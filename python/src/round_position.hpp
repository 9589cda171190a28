// A step's place in a round of any length, as Python passes it (RegionSync.after_step,
// MergeCalendar.changes_after): ValueError unless 1 <= in_round <= round_steps.
#pragma once

#include <fmt/format.h>
#include <pybind11/pybind11.h>

#include <cstdint>

namespace geotrain::python {

inline void check_position(uint32_t in_round, uint32_t round_steps) {
  if (in_round < 1 || in_round > round_steps)
    throw pybind11::value_error(
        fmt::format("a step's place in its round is {} of {}: allowed 1 <= in_round <= round_steps",
                    in_round, round_steps));
}

}  // namespace geotrain::python
