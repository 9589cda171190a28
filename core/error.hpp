// Error taxonomy and check macros shared by every layer.
//
// Three levels of error (STYLE.md, principle 5):
//  - our bug: GT_ASSERT logs the expression, file:line and a message, then aborts;
//  - bad input (anything decoded off the wire, any config value, any file): GT_REQUIRE throws
//    InputError whose message names the field and the offending value; callers keep their state;
//  - a failed call into a system library (CUDA, cuBLAS, NCCL, ZeroMQ, zstd): SystemError,
//    thrown by the check macros in check_*.hpp with file:line and the failing expression.
// Expected outcomes (timeouts, would-block, not found) are not errors: they go in return types.
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/error_types.hpp"

namespace geotrain::detail {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace geotrain::detail

// GT_ASSERT(cond, "fmt {}", args...): an invariant of our own code. Never for input checks.
#define GT_ASSERT(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      ::geotrain::detail::assert_fail(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// GT_REQUIRE(cond, "field 'x' is {}, must be ...", x): a precondition on input; throws InputError.
#define GT_REQUIRE(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) [[unlikely]]                                   \
      throw ::geotrain::InputError(::fmt::format(__VA_ARGS__)); \
  } while (0)
