// RssSampler: the memory of a run's processes over time, for `geotrain chaos` (whether a long run
// under faults grows: docs/chaos.md). The observer hands it each live process every few seconds;
// it reads the resident set size from /proc/<pid>/status (VmRSS) and keeps each process's samples,
// by name across its incarnations (a process killed every few minutes never lives long, but a
// leak in what it restores, or in its peers, still shows in its name's samples). report()
// compares, per process, the median RSS of an early span (from `settle_s` on) with that of the
// run's last span, and gives the largest growth per kind of process.
//
// Linux only (an empty report elsewhere: no /proc). Not thread-safe: the observer's thread.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace geotrain::launcher {

class RssSampler {
 public:
  // Samples `pid` (named `process`, of kind `kind`: process_kind()) at `t` seconds; a process
  // that is gone is skipped.
  void sample(double t, int pid, const std::string& process, const std::string& kind);

  // {"settle_s", "span_s", "samples", "processes": {name: {"kind", "incarnations", "early_kib",
  //  "late_kib", "peak_kib"}}, "growth_kib": {kind: largest late - early}}: early is the median
  // of the samples in [settle_s, settle_s + span), late of those in the last span (span_s:
  // min(600 s, half of what follows settle_s)). Processes without samples in both are left out.
  nlohmann::json report(double settle_s) const;

 private:
  struct Process {
    std::string kind;
    std::set<int> pids;
    std::vector<std::pair<double, uint64_t>> samples;  // (t, KiB), in time order
  };
  std::map<std::string, Process> by_name_;
  double last_t_ = 0;
  size_t samples_ = 0;
};

// A process's resident set size in KiB (VmRSS), or 0 when it cannot be read.
uint64_t rss_kib(int pid);

}  // namespace geotrain::launcher
