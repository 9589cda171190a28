// Fuzz target: the server's YAML config loader, server::parse_server_config.
// Input: the YAML text. Contract: only InputError; an accepted config answers region_index for
// each of its regions and computes its state hash. Seeds: the configs in configs/.
#include "fuzz/fuzz_target.hpp"
#include "server/config.hpp"

using namespace geotrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  server::ServerConfig config;
  if (!fuzz::accepts([&] { config = server::parse_server_config(text, "<fuzz>"); })) return 0;
  for (uint32_t i = 0; i < config.regions.size(); ++i)
    GT_FUZZ_CHECK(config.region_index(config.regions[i]) <= i, "region_index disagrees");
  (void)config.state_hash(0);
  return 0;
}
