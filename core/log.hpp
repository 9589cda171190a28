// Logging: spdlog, configured once by the process's main() through setup_logging. Everything
// else logs through spdlog's default logger (spdlog::info etc.) and never configures sinks.
// Thread-safe (spdlog's _mt sinks).
#pragma once

#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>
#include <string>

namespace geotrain {

struct LogOptions {
  std::string process = "geotrain";  // shown in every line, e.g. "server/us-east"
  spdlog::level::level_enum level = spdlog::level::info;
  std::optional<std::filesystem::path> file;  // also log here (appended) when set
  bool color = true;                          // colour the console when it is a terminal
};

// Replaces spdlog's default logger with a stderr sink (and the optional file sink).
void setup_logging(const LogOptions& options);

// Parses "trace|debug|info|warn|error|critical|off"; throws InputError naming the value otherwise.
spdlog::level::level_enum parse_log_level(const std::string& name);

}  // namespace geotrain
