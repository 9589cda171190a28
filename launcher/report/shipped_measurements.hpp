// run.compare_with: measurements shipped with a config (another configuration of the same job,
// measured once and written down), which the run's report shows beside the run's own figures:
// what a newcomer running configs/lm-uneven.yaml would have waited with fixed H, say, without
// running that too.
//
//   run:
//     compare_with:
//       - {label: "fixed H = 8 on this fleet", time_to_target_s: 747.1, final: 1.894,
//          measured: "2026-11-28, 2-core VM, configs/sweeps/uneven-lm.yaml"}
//
// Plain values and pure functions; read by the run's settings (to refuse a bad entry before
// anything starts) and by the report.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/yaml_reader.hpp"

namespace geotrain::launcher {

struct ShippedMeasurement {
  std::string label;                       // what was measured
  std::optional<double> time_to_target_s;  // its time to run.target_*
  std::optional<double> final;             // its final figure (bpb, or accuracy in [0, 1])
  std::string measured;                    // when, where and how (free text)
};

// run.compare_with (`run`: the config's run section; may be absent): InputError naming the
// entry on a missing label, an unknown key or a value out of range.
std::vector<ShippedMeasurement> read_shipped_measurements(const YamlReader& in,
                                                          const YAML::Node& run);

// The report's section: each measurement against the run's summary `s` (time to target, this
// run's time over the measurement's, final figure); empty without measurements.
std::string shipped_measurements_table(const std::vector<ShippedMeasurement>& shipped,
                                       const nlohmann::json& s, bool lm);

}  // namespace geotrain::launcher
