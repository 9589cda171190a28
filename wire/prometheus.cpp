#include "wire/prometheus.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

namespace geotrain::wire {

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Exposition::sample(std::string_view name, const PrometheusLabels& labels,
                        const std::string& value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      text_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first,
                           prometheus_label_value(labels[i].second));
    text_ += '}';
  }
  text_ += ' ';
  text_ += value;
  text_ += '\n';
}

std::string prometheus_number(double v) { return fmt::format("{}", v); }

std::string prometheus_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

ProcessStats read_process_stats() {
  ProcessStats p;
  const long page = sysconf(_SC_PAGESIZE);
  const long ticks = sysconf(_SC_CLK_TCK);
  if (std::ifstream statm("/proc/self/statm"); statm) {
    double size = 0, resident = 0;
    if (statm >> size >> resident) {
      p.virtual_bytes = size * double(page);
      p.resident_bytes = resident * double(page);
    }
  }
  if (std::ifstream stat("/proc/self/stat"); stat && ticks > 0) {
    std::string line;
    std::getline(stat, line);
    // Fields after the command name (which may hold spaces, hence the last ')'): state is
    // field 3, utime 14, stime 15, starttime 22 (clock ticks after boot).
    const auto close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::vector<std::string> f{std::istream_iterator<std::string>(rest), {}};
      if (f.size() > 19) {
        p.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / double(ticks);
        if (std::ifstream boot("/proc/stat"); boot) {
          std::string key;
          double btime = 0;
          while (boot >> key)
            if (key == "btime" && boot >> btime) {
              p.start_time_seconds = btime + std::stod(f[19]) / double(ticks);
              break;
            }
        }
      }
    }
  }
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    ++fds;
  if (!ec && fds > 0) p.open_fds = fds;
  return p;
}

void add_process_metrics(Exposition& out, const ProcessStats& process) {
  // The standard process metrics of Prometheus client libraries (no server label: they are the
  // process's, and a scrape's `instance` names it).
  const std::tuple<const std::optional<double>&, const char*, const char*, const char*> proc[] = {
      {process.resident_bytes, "process_resident_memory_bytes", "gauge",
       "Resident memory size in bytes."},
      {process.virtual_bytes, "process_virtual_memory_bytes", "gauge",
       "Virtual memory size in bytes."},
      {process.cpu_seconds, "process_cpu_seconds_total", "counter",
       "Total user and system CPU time spent in seconds."},
      {process.open_fds, "process_open_fds", "gauge", "Number of open file descriptors."},
      {process.start_time_seconds, "process_start_time_seconds", "gauge",
       "Start time of the process since unix epoch in seconds."}};
  for (const auto& [value, name, type, help] : proc) {
    if (!value) continue;
    out.single(name, type, help, {}, prometheus_number(*value));
  }
}

}  // namespace geotrain::wire
