#include "core/error.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace geotrain {

SystemError::SystemError(std::string_view api, std::string_view expr, std::string_view file,
                         int line, std::string_view detail)
    : std::runtime_error(fmt::format("{} error at {}:{}: {}: {}", api, file, line, expr, detail)),
      api_(api) {}

namespace detail {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  // Written to stderr directly as well: the logger itself may be what is broken.
  std::fprintf(stderr, "geotrain: internal error at %s:%d: assertion '%s' failed: %s\n", file, line,
               expr, msg.c_str());
  spdlog::critical("internal error at {}:{}: assertion '{}' failed: {}", file, line, expr, msg);
  spdlog::shutdown();
  std::abort();
}

}  // namespace detail
}  // namespace geotrain
