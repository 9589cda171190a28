#include <fmt/core.h>

#include "bench/leader_bench.hpp"

namespace geotrain::bench {

int run_leader_bench(const LeaderBenchOptions& options) {
  const char* note = "this build has no CUDA (nvcc was not found or GEOTRAIN_CUDA=OFF)";
  if (options.json)
    fmt::print("{{\"cuda_device\": null, \"cuda_note\": \"{}\"}}\n", note);
  else
    fmt::print("geotrain bench leader: {}\n", note);
  return 0;
}

}  // namespace geotrain::bench
