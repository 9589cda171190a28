#include "launcher/chaos/rss_sampler.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

namespace geotrain::launcher {

using nlohmann::json;

namespace {
constexpr double kLongestSpan = 600;

// The median of the samples in [from, to); nullopt without any.
std::optional<uint64_t> median_in(const std::vector<std::pair<double, uint64_t>>& samples,
                                  double from, double to) {
  std::vector<uint64_t> in;
  for (const auto& [t, kib] : samples)
    if (t >= from && t < to) in.push_back(kib);
  if (in.empty()) return std::nullopt;
  std::nth_element(in.begin(), in.begin() + in.size() / 2, in.end());
  return in[in.size() / 2];
}
}  // namespace

uint64_t rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) {
      std::istringstream fields(line.substr(6));
      uint64_t kib = 0;
      fields >> kib;
      return kib;
    }
  return 0;
}

void RssSampler::sample(double t, int pid, const std::string& process, const std::string& kind) {
  const uint64_t kib = rss_kib(pid);
  if (kib == 0) return;  // gone (or a zombie)
  auto& p = by_name_[process];
  p.kind = kind;
  p.pids.insert(pid);
  p.samples.emplace_back(t, kib);
  last_t_ = std::max(last_t_, t);
  ++samples_;
}

json RssSampler::report(double settle_s) const {
  const double span = std::min(kLongestSpan, std::max(0.0, last_t_ - settle_s) / 2);
  json processes = json::object();
  json growth = json::object();
  for (const auto& [name, p] : by_name_) {
    const auto early = median_in(p.samples, settle_s, settle_s + span);
    const auto late = median_in(p.samples, last_t_ - span, last_t_ + 1);
    if (span <= 0 || !early || !late) continue;
    uint64_t peak = 0;
    for (const auto& s : p.samples) peak = std::max(peak, s.second);
    processes[name] = {{"kind", p.kind},
                       {"incarnations", p.pids.size()},
                       {"early_kib", *early},
                       {"late_kib", *late},
                       {"peak_kib", peak}};
    const int64_t grew = static_cast<int64_t>(*late) - static_cast<int64_t>(*early);
    if (!growth.contains(p.kind) || grew > growth[p.kind].get<int64_t>()) growth[p.kind] = grew;
  }
  return {{"settle_s", settle_s},
          {"span_s", span},
          {"samples", samples_},
          {"processes", processes},
          {"growth_kib", growth}};
}

}  // namespace geotrain::launcher
