// Fuzz target: netsim's YAML loaders, netsim::parse_netsim_config and netsim::parse_profile.
// Input: [selector][YAML text]. Selector bit 0: 0 a netsim config, 1 a WAN profile. A netsim
// config's `profile: <path>` is resolved against a scratch folder holding a valid profile as
// us-eu.yaml. Contract: only InputError. Seeds: configs/wan/ and configs/wan/example-netsim.yaml.
#include "fuzz/fuzz_target.hpp"
#include "netsim/config.hpp"

using namespace geotrain;

namespace {
// configs/wan/us-eu.yaml, which the example netsim config (a seed) names.
constexpr std::string_view kProfile = R"(name: us-eu
regions: [us-east, eu-west]
defaults: {bandwidth_mbps: 1000, jitter_ms: 0.5}
links:
  - between: [us-east, eu-west]
    delay_ms: 40
)";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    fuzz::write_file(fuzz::scratch_dir() / "us-eu.yaml", kProfile);
    return fuzz::scratch_dir();
  }();
  fuzz::InputReader in(data, size);
  const bool profile = in.byte() & 1;
  const auto rest = in.rest();
  const std::string text(reinterpret_cast<const char*>(rest.data()), rest.size());
  if (profile)
    fuzz::accepts([&] { (void)netsim::parse_profile(text, "<fuzz>"); });
  else
    fuzz::accepts([&] { (void)netsim::parse_netsim_config(text, "<fuzz>", dir); });
  return 0;
}
