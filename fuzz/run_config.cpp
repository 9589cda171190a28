// Fuzz target: the `run` section loader of `geotrain run`, launcher::parse_run_settings.
// Input: the YAML text of a whole config; a relative run.wan_profile is resolved against a
// scratch folder laid out like configs/ (fuzz/launcher_files.hpp). Contract: only InputError; an
// accepted config has regions and at least one worker per region. Seeds: the configs in configs/.
#include "fuzz/launcher_files.hpp"
#include "launcher/run/run_settings.hpp"

using namespace geotrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fuzz::launcher_config_dir();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  launcher::RunSettings s;
  if (!fuzz::accepts([&] { s = launcher::parse_run_settings(text, "<fuzz>", dir, "fuzz"); }))
    return 0;
  GT_FUZZ_CHECK(!s.regions.empty(), "accepted run settings without regions");
  GT_FUZZ_CHECK(s.workers.total() >= s.regions.size(), "accepted run settings without workers");
  return 0;
}
