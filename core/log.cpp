#include "core/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <vector>

#include "core/error.hpp"

namespace geotrain {

void setup_logging(const LogOptions& options) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(
      options.color ? spdlog::color_mode::automatic : spdlog::color_mode::never);
  sinks.push_back(console);
  if (options.file) {
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file->string()));
  }
  auto logger = std::make_shared<spdlog::logger>(options.process, sinks.begin(), sinks.end());
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%n] %v");
  logger->set_level(options.level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

spdlog::level::level_enum parse_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  // from_str maps unknown names to `off`; only "off" itself may mean off.
  GT_REQUIRE(level != spdlog::level::off || name == "off",
             "log level '{}' is not one of trace, debug, info, warn, error, critical, off", name);
  return level;
}

}  // namespace geotrain
