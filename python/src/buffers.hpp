// Views of Python arrays as the C++ core's spans, without copying: NumPy arrays and anything else
// with the buffer protocol, and CPU torch tensors (through Tensor.numpy(), which shares the
// tensor's memory). Anything that is not contiguous float32 (or, for payloads, contiguous bytes)
// is refused with a ValueError naming the argument, its dtype, device or strides.
//
// A view borrows: it holds a reference to the Python object whose memory it shows, so the memory
// lives as long as the view, and the GIL may be released while C++ works on it.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "core/span.hpp"

namespace geotrain::python {

namespace py = pybind11;

struct FloatView {
  py::object owner;  // keeps the memory alive
  FloatSpan span;
};

struct ByteView {
  py::object owner;
  ConstByteSpan span;
};

// `what` names the argument in errors ("x", "out"). writable: the view is written to.
FloatView float_view(const py::handle& obj, bool writable, const char* what);
ByteView byte_view(const py::handle& obj, const char* what);

}  // namespace geotrain::python
