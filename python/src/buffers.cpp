#include "buffers.hpp"

#include <fmt/format.h>

namespace geotrain::python {

namespace {

bool is_torch_tensor(const py::handle& obj) {
  const auto type = py::type::of(obj);
  const auto module = py::str(type.attr("__module__")).cast<std::string>();
  return module.rfind("torch", 0) == 0 && py::hasattr(obj, "numpy") &&
         py::hasattr(obj, "is_contiguous");
}

// A torch tensor's memory as a NumPy array (shared, not copied), after the checks that give a
// torch user the clearer message.
py::object torch_as_numpy(const py::handle& t, const char* what) {
  const auto device = py::str(t.attr("device")).cast<std::string>();
  if (device != "cpu")
    throw py::value_error(fmt::format(
        "{}: a torch tensor on device '{}'; geotrain codecs read and write CPU memory (use "
        ".cpu(), or let geotrain.torch.OuterSync stage GPU parameters)",
        what, device));
  const auto dtype = py::str(t.attr("dtype")).cast<std::string>();
  if (dtype != "torch.float32")
    throw py::value_error(fmt::format("{}: dtype is {}, expected torch.float32", what, dtype));
  if (!t.attr("is_contiguous")().cast<bool>())
    throw py::value_error(fmt::format(
        "{}: the torch tensor is not contiguous (strides {}); pass .contiguous() (a copy)", what,
        py::str(t.attr("stride")()).cast<std::string>()));
  return t.attr("detach")().attr("numpy")();
}

py::buffer_info request(const py::handle& obj, bool writable, const char* what) {
  if (!PyObject_CheckBuffer(obj.ptr()))
    throw py::type_error(
        fmt::format("{}: expected a NumPy array, a CPU torch tensor or another buffer, got {}",
                    what, py::str(py::type::of(obj).attr("__name__")).cast<std::string>()));
  try {
    return py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (const py::error_already_set& e) {
    throw py::value_error(
        fmt::format("{}: {}{}", what, writable ? "not writable: " : "", e.what()));
  }
}

bool c_contiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

}  // namespace

FloatView float_view(const py::handle& obj, bool writable, const char* what) {
  py::object owner =
      is_torch_tensor(obj) ? torch_as_numpy(obj, what) : py::reinterpret_borrow<py::object>(obj);
  const auto info = request(owner, writable, what);
  const bool f32 = info.format == "f" || info.format == "<f" || info.format == "=f";
  if (!f32 || info.itemsize != 4)
    throw py::value_error(fmt::format("{}: element format '{}' ({} bytes), expected float32", what,
                                      info.format, info.itemsize));
  if (!c_contiguous(info))
    throw py::value_error(fmt::format(
        "{}: the array is not contiguous; pass numpy.ascontiguousarray(...) (a copy)", what));
  if (writable && info.readonly)
    throw py::value_error(fmt::format("{}: the array is read-only", what));
  return {std::move(owner), FloatSpan(static_cast<float*>(info.ptr), size_t(info.size))};
}

ByteView byte_view(const py::handle& obj, const char* what) {
  auto owner = py::reinterpret_borrow<py::object>(obj);
  const auto info = request(owner, false, what);
  if (!c_contiguous(info))
    throw py::value_error(fmt::format("{}: the payload buffer is not contiguous", what));
  return {std::move(owner), ConstByteSpan(static_cast<const std::byte*>(info.ptr),
                                          size_t(info.size * info.itemsize))};
}

}  // namespace geotrain::python
