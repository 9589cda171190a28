// GT_ZMQ_CHECK(expr): for raw libzmq calls that return -1 and set errno. Throws SystemError with
// file:line, the expression and zmq_strerror; otherwise yields the call's value. (cppzmq's own
// calls throw zmq::error_t; code that wraps them rethrows through geotrain::rethrow_zmq.)
#pragma once

#include <zmq.h>

#include "core/error.hpp"

namespace geotrain::detail {
template <typename T>
T zmq_check(T rc, const char* expr, const char* file, int line) {
  if (rc == T(-1)) [[unlikely]] {
    int err = zmq_errno();
    throw SystemError("zmq", expr, file, line,
                      fmt::format("{} (errno {})", zmq_strerror(err), err));
  }
  return rc;
}
}  // namespace geotrain::detail

#define GT_ZMQ_CHECK(expr) ::geotrain::detail::zmq_check((expr), #expr, __FILE__, __LINE__)
