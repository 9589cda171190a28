// The extension module geotrain._core (docs/python.md). The C++ core is the one implementation;
// this module only binds it: codecs and error feedback (codec_bindings.cpp), the region leader's
// sync (sync_bindings.cpp), a run's settings (run_bindings.cpp), the metrics events
// (events_bindings.cpp). The package geotrain/ (python/geotrain) wraps it for Python users.
// InputError (bad input: a spec, a payload, a config) is ValueError; SystemError (a failed
// library call, a silent server) is RuntimeError.
#include <pybind11/pybind11.h>

#include "core/error.hpp"
#include "core/version.hpp"

namespace geotrain::python {
namespace py = pybind11;
void bind_codecs(py::module_& m);
void bind_sync(py::module_& m);
void bind_schedule(py::module_& m);
void bind_run(py::module_& m);
void bind_events(py::module_& m);
}  // namespace geotrain::python

PYBIND11_MODULE(_core, m) {
  namespace py = pybind11;
  m.doc() = "geotrain's C++ core: codecs, error feedback, the region leader's sync";
  m.attr("__version__") = geotrain::kVersion;
  m.attr("built_with_cuda") = geotrain::kBuiltWithCuda;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const geotrain::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const geotrain::SystemError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  geotrain::python::bind_codecs(m);
  geotrain::python::bind_sync(m);
  geotrain::python::bind_schedule(m);
  geotrain::python::bind_run(m);
  geotrain::python::bind_events(m);
}
