// Fuzz target: the worker's YAML config loader, worker::parse_worker_config.
// Input: the YAML text. Contract: only InputError; an accepted config has regions and answers
// region_index for each. Seeds: the configs in configs/.
#include "fuzz/fuzz_target.hpp"
#include "worker/config.hpp"

using namespace geotrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  worker::WorkerConfig config;
  if (!fuzz::accepts([&] { config = worker::parse_worker_config(text, "<fuzz>"); })) return 0;
  GT_FUZZ_CHECK(!config.regions.empty(), "an accepted worker config has no regions");
  for (uint32_t i = 0; i < config.regions.size(); ++i)
    GT_FUZZ_CHECK(config.region_index(config.regions[i]) <= i, "region_index disagrees");
  return 0;
}
