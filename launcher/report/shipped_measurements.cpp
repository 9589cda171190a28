#include "launcher/report/shipped_measurements.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/run_summary_keys.hpp"

namespace geotrain::launcher {

namespace k = summary::field;

std::vector<ShippedMeasurement> read_shipped_measurements(const YamlReader& in,
                                                          const YAML::Node& run) {
  std::vector<ShippedMeasurement> out;
  if (!run || !run.IsMap() || !run["compare_with"]) return out;
  const auto list = run["compare_with"];
  GT_REQUIRE(list.IsSequence(),
             "{}: run.compare_with must be a list of {{label, time_to_target_s, final, measured}}",
             in.source());
  for (size_t i = 0; i < list.size(); ++i) {
    const auto key = fmt::format("run.compare_with[{}]", i);
    const auto e = list[i];
    GT_REQUIRE(e.IsMap(), "{}: {} must be a mapping", in.source(), key);
    in.check_keys(e, key, {"label", "time_to_target_s", "final", "measured"});
    GT_REQUIRE(e["label"], "{}: {} has no label (what was measured)", in.source(), key);
    ShippedMeasurement m;
    m.label = in.string(e["label"], key + ".label");
    if (auto n = e["time_to_target_s"])
      m.time_to_target_s = in.number<double>(n, key + ".time_to_target_s", 0.0, 1e9);
    if (auto n = e["final"]) m.final = in.number<double>(n, key + ".final", 0.0, 1e6);
    if (auto n = e["measured"]) m.measured = in.string(n, key + ".measured");
    out.push_back(std::move(m));
  }
  return out;
}

std::string shipped_measurements_table(const std::vector<ShippedMeasurement>& shipped,
                                       const nlohmann::json& s, bool lm) {
  if (shipped.empty()) return {};
  const auto number = [&](const char* key) {
    const auto v = s.value(key, nlohmann::json(nullptr));
    return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
  };
  const auto time = number(k::time_to_target_seconds);
  const auto final = number(lm ? k::final_val_bpb : k::final_test_accuracy);
  const auto figure = [&](std::optional<double> v) {
    if (!v) return std::string("-");
    return lm ? fmt::format("{:.3f}", *v) : fmt::format("{:.2f}%", 100 * *v);
  };
  std::string md = fmt::format(
      "\n## Against shipped measurements (run.compare_with)\n\n"
      "This run: time to target {}, final {} {}.\n\n"
      "| measured | time to target | this run's time over it | final | when and how |\n"
      "|---|---|---|---|---|\n",
      time ? fmt::format("{:.1f} s", *time) : "not reached", lm ? "validation bpb" : "accuracy",
      figure(final));
  for (const auto& m : shipped) {
    const std::string ratio = m.time_to_target_s && time && *time > 0
                                  ? fmt::format("{:.2f}x", *time / *m.time_to_target_s)
                                  : "-";
    md += fmt::format("| {} | {} | {} | {} | {} |\n", m.label,
                      m.time_to_target_s ? fmt::format("{:.1f} s", *m.time_to_target_s) : "-",
                      ratio, figure(m.final), m.measured.empty() ? "-" : m.measured);
  }
  return md;
}

}  // namespace geotrain::launcher
