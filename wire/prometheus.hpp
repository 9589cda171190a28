// The Prometheus text exposition format (version 0.0.4), the part every geotrain process that
// serves `/metrics` (wire/metrics_endpoint.hpp) shares: an Exposition that writes metric families
// and samples with escaped labels, and the standard process_* metrics of Prometheus client
// libraries, read from /proc on Linux (each left out where it cannot be read). What a server and
// a worker export on top: server/prometheus_text.hpp, worker/run/worker_metrics.hpp;
// docs/monitoring.md lists them all. Pure functions apart from the /proc reads; an Exposition is
// one thread's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace geotrain::wire {

using PrometheusLabels = std::vector<std::pair<std::string, std::string>>;

// One metric family at a time: its # HELP and # TYPE lines, then its samples.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const PrometheusLabels& labels, const std::string& value);
  // A family with one sample: the common case.
  void single(std::string_view name, std::string_view type, std::string_view help,
              const PrometheusLabels& labels, const std::string& value) {
    family(name, type, help);
    sample(name, labels, value);
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

// A label value escaped as the format requires (backslash, double quote, newline).
std::string prometheus_label_value(const std::string& value);
// A sample value: integral doubles without a fraction, others in the shortest exact form.
std::string prometheus_number(double v);

struct ProcessStats {
  std::optional<double> resident_bytes, virtual_bytes, cpu_seconds, open_fds, start_time_seconds;
};

// This process's statistics from /proc (each one absent where it cannot be read).
ProcessStats read_process_stats();
// process_resident_memory_bytes, process_cpu_seconds_total, ... without labels (a scrape's
// `instance` names the process).
void add_process_metrics(Exposition& out, const ProcessStats& process);

}  // namespace geotrain::wire
