// MetricsLog: one JSON object per line, appended to a file in the run folder (docs/run-folder.md).
// Every line gets "event" and "time" (seconds since the log was opened). Flushed per line, so
// that a launcher tailing the file sees progress and a crash loses at most the line in flight.
// Every line is held to the schema (core/metrics_events.json): an event or field it does not
// name is a bug in the writer (GT_ASSERT), so no writer can drift from what readers expect.
// Owns the file. Not thread-safe: one writer thread.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/metrics_events_check.hpp"

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
    const std::string wrong = check(event, fields, true);
    GT_ASSERT(wrong.empty(), "metrics event: {}", wrong);
    append(event, std::move(fields));
  }

  // The Python API's writer: the user's own fields go into the events that take them (not
  // `strict`), and a field the schema does not allow is an InputError, not a bug of ours.
  void write_user(const std::string& event, nlohmann::json fields) {
    const std::string wrong = check(event, fields, false);
    GT_REQUIRE(wrong.empty(), "metrics event: {}", wrong);
    append(event, std::move(fields));
  }

  void close() { out_.close(); }

  // Called with every line after it is written (on the writer's thread): the worker's
  // Prometheus metrics follow the same events (worker/run/worker_metrics.hpp).
  void observe(std::function<void(const nlohmann::json&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  static std::string check(const std::string& event, const nlohmann::json& fields, bool strict) {
    std::vector<std::string> keys;
    for (const auto& item : fields.items()) keys.push_back(item.key());
    return events::check(event, keys, strict);
  }
  void append(const std::string& event, nlohmann::json fields) {
    GT_REQUIRE(out_.is_open(), "metrics event '{}' written after the log was closed", event);
    fields["event"] = event;
    fields["time"] = seconds();
    out_ << fields.dump() << '\n';
    out_.flush();
    if (observer_) observer_(fields);
  }

  std::chrono::steady_clock::time_point start_;
  std::ofstream out_;
  std::function<void(const nlohmann::json&)> observer_;
};

// Path of a worker's metrics file in the run folder.
inline std::filesystem::path worker_metrics_path(const std::filesystem::path& run_dir,
                                                 const std::string& region, uint32_t rank) {
  return run_dir / fmt::format("worker-{}-{}.metrics.jsonl", region, rank);
}

}  // namespace geotrain::worker
