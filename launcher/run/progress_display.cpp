#include "launcher/run/progress_display.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace geotrain::launcher {

std::vector<std::string> progress_lines(const RunMonitor& monitor,
                                        const std::vector<std::string>& regions) {
  std::size_t width = 6;
  for (const auto& r : regions) width = std::max(width, r.size());
  // A language model's regions show validation bits per byte where a classifier's show accuracy.
  const bool lm = monitor.language_model();
  std::vector<std::string> lines;
  for (const auto& name : regions) {
    auto it = monitor.regions().find(name);
    if (it == monitor.regions().end()) {
      lines.push_back(fmt::format("{:<{}}  starting", name, width));
      continue;
    }
    const auto& r = it->second;
    const std::string planned = r.rounds_planned ? fmt::format("/{:.0f}", *r.rounds_planned) : "";
    const std::string metric =
        lm ? fmt::format("bpb {:>6}", r.val_bpb ? fmt::format("{:.2f}", *r.val_bpb) : "-")
           : fmt::format("acc {:>6}", r.accuracy ? fmt::format("{:.2f}%", 100 * *r.accuracy) : "-");
    lines.push_back(fmt::format(
        "{:<{}}  round {:>4}{:<5} step {:>6}  loss {:>7}  {}  WAN {:>8.2f} MB  stale {:>3}  "
        "{:>5.2f} rounds/s",
        name, width, r.rounds_done, planned, r.step, r.loss ? fmt::format("{:.4f}", *r.loss) : "-",
        metric, r.wan_bytes() / 1e6, r.staleness ? fmt::format("{:.0f}", *r.staleness) : "-",
        r.rounds_per_s()));
  }
  return lines;
}

void ProgressDisplay::show(const RunMonitor& monitor, const std::vector<std::string>& regions,
                           double elapsed_s, const std::vector<std::string>& notes) {
  auto lines = progress_lines(monitor, regions);
  for (const auto& n : notes) lines.push_back("fault: " + n);
  std::string text;
  if (redraw_) {
    if (drawn_ > 0) text += fmt::format("\x1b[{}A", drawn_);
    text += fmt::format("\x1b[2K[{:6.1f} s]\n", elapsed_s);
    for (const auto& l : lines) text += "\x1b[2K  " + l + "\n";
    drawn_ = lines.size() + 1;
  } else {
    for (const auto& l : lines) text += fmt::format("[{:6.1f} s] {}\n", elapsed_s, l);
  }
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

}  // namespace geotrain::launcher
