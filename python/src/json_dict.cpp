#include "json_dict.hpp"

#include <fmt/format.h>

#include <string>

#include "core/error.hpp"

namespace py = pybind11;

namespace geotrain::python {

namespace {
py::object value_to_py(const nlohmann::json& v) {
  if (v.is_boolean()) return py::bool_(v.get<bool>());
  if (v.is_number_unsigned()) return py::int_(v.get<uint64_t>());
  if (v.is_number_integer()) return py::int_(v.get<int64_t>());
  if (v.is_number()) return py::float_(v.get<double>());
  if (v.is_string()) return py::str(v.get<std::string>());
  if (v.is_object()) return to_dict(v);
  if (v.is_array()) {
    py::list out;
    for (const auto& x : v) out.append(value_to_py(x));
    return out;
  }
  return py::none();
}
}  // namespace

py::dict to_dict(const nlohmann::json& j) {
  py::dict d;
  for (const auto& [key, v] : j.items()) d[key.c_str()] = value_to_py(v);
  return d;
}

namespace {
nlohmann::json value_to_json(const py::handle& v) {
  if (v.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();  // NaN: written as null
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::dict>(v)) return to_json(v.cast<py::dict>());
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    auto a = nlohmann::json::array();
    for (const auto& x : v) a.push_back(value_to_json(x));
    return a;
  }
  // A NumPy or torch scalar, or anything else that says it is a number.
  if (py::hasattr(v, "__float__")) return v.attr("__float__")().cast<double>();
  throw InputError(
      fmt::format("a metrics field of type {} is not a number, string, bool, list "
                  "or dict",
                  py::str(py::type::of(v).attr("__name__")).cast<std::string>()));
}
}  // namespace

nlohmann::json to_json(const py::dict& d) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : d) j[py::str(k).cast<std::string>()] = value_to_json(v);
  return j;
}

}  // namespace geotrain::python
