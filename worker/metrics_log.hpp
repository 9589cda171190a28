// MetricsLog: one JSON object per line, appended to a file in the run folder (docs/run-folder.md).
// Every line gets "event" and "time" (seconds since the log was opened). Flushed per line, so
// that a launcher tailing the file sees progress and a crash loses at most the line in flight.
// Owns the file. Not thread-safe: one writer thread.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.hpp"

namespace geotrain::worker {

class MetricsLog {
 public:
  explicit MetricsLog(const std::filesystem::path& file)
      : start_(std::chrono::steady_clock::now()) {
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    out_.open(file, std::ios::app);
    GT_REQUIRE(out_.good(), "metrics file '{}' cannot be opened for writing", file.string());
  }

  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void write(const std::string& event, nlohmann::json fields) {
    fields["event"] = event;
    fields["time"] = seconds();
    out_ << fields.dump() << '\n';
    out_.flush();
    if (observer_) observer_(fields);
  }

  // Called with every line after it is written (on the writer's thread): the worker's
  // Prometheus metrics follow the same events (worker/worker_metrics.hpp).
  void observe(std::function<void(const nlohmann::json&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  std::chrono::steady_clock::time_point start_;
  std::ofstream out_;
  std::function<void(const nlohmann::json&)> observer_;
};

}  // namespace geotrain::worker
