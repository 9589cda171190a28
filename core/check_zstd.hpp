// GT_ZSTD_CHECK(expr): evaluates a zstd call returning size_t; throws SystemError naming the
// expression, file:line and ZSTD_getErrorName when it reports an error, else yields the value.
#pragma once

#include <zstd.h>

#include "core/error.hpp"

namespace geotrain::detail {
inline size_t zstd_check(size_t rc, const char* expr, const char* file, int line) {
  if (ZSTD_isError(rc)) [[unlikely]]
    throw SystemError("zstd", expr, file, line, ZSTD_getErrorName(rc));
  return rc;
}
}  // namespace geotrain::detail

#define GT_ZSTD_CHECK(expr) ::geotrain::detail::zstd_check((expr), #expr, __FILE__, __LINE__)
