// JSON objects across the binding: the C++ side's nlohmann::json as a Python dict, and back.
#pragma once

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

namespace geotrain::python {

// A JSON object as a Python dict: numbers, strings, booleans, null, lists and dicts.
pybind11::dict to_dict(const nlohmann::json& j);

// A Python dict as a JSON object: numbers (and what has __float__: NumPy and torch scalars),
// strings, bools, None, lists and dicts; ValueError for anything else. Non-finite floats are
// written as null, as the C++ writers write them.
nlohmann::json to_json(const pybind11::dict& d);

}  // namespace geotrain::python
