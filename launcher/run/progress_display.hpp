// ProgressDisplay: the live view of a run, one line per region (round, step, loss, newest test
// accuracy, or newest validation bits per byte for a language model, WAN megabytes, staleness,
// rounds per second), drawn from a RunMonitor.
//
// On a terminal the block of lines is redrawn in place (ANSI cursor-up + clear-line); otherwise
// each show() prints the lines once, prefixed with the elapsed time, for logs. The caller
// decides how often to call show(). Writes to the FILE it is given; not thread-safe.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "launcher/report/run_monitor.hpp"

namespace geotrain::launcher {

// The lines shown for a monitor's state, regions in the given order (regions not yet seen
// show as waiting).
std::vector<std::string> progress_lines(const RunMonitor& monitor,
                                        const std::vector<std::string>& regions);

class ProgressDisplay {
 public:
  ProgressDisplay(std::FILE* out, bool redraw) : out_(out), redraw_(redraw) {}

  // `notes` (faults and restarts, launcher/report/fault_log.hpp) follow the regions' lines.
  void show(const RunMonitor& monitor, const std::vector<std::string>& regions, double elapsed_s,
            const std::vector<std::string>& notes = {});
  // Leaves the last block on screen; later output starts below it.
  void finish() { drawn_ = 0; }

 private:
  std::FILE* out_;
  bool redraw_;
  std::size_t drawn_ = 0;
};

}  // namespace geotrain::launcher
