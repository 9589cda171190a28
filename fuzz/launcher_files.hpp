// The files the launcher's loaders may name, laid out in a scratch folder like configs/: a base
// config for sweeps (demo.yaml, lm-demo.yaml) and the WAN profile they name (wan/global-3.yaml).
// Shared by the run and sweep fuzz targets; returns the folder standing for configs/.
#pragma once

#include "fuzz/fuzz_target.hpp"

namespace geotrain::fuzz {

inline const std::filesystem::path& launcher_config_dir() {
  static const std::filesystem::path dir = [] {
    constexpr std::string_view kBase = R"(regions: [us-east, eu-west]
model: {kind: mlp, arch: "784-64-10", tensors: [{name: w, size: 1024}]}
server: {staleness_bound: 1}
worker: {critical_codec: onebit}
run: {name: base, wan_profile: wan/global-3.yaml, target_accuracy: 0.5}
)";
    constexpr std::string_view kProfile = R"(name: global-3
regions: [us-east, eu-west, ap-south]
defaults: {bandwidth_mbps: 100}
links:
  - {between: any, delay_ms: 50}
)";
    const auto configs = scratch_dir() / "configs";
    std::filesystem::create_directories(configs / "wan");
    std::filesystem::create_directories(configs / "sweeps");
    write_file(configs / "demo.yaml", kBase);
    write_file(configs / "lm-demo.yaml", kBase);
    write_file(configs / "wan" / "global-3.yaml", kProfile);
    return configs;
  }();
  return dir;
}

}  // namespace geotrain::fuzz
