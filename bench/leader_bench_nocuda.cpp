#include "bench/leader_bench.hpp"

namespace geotrain::bench {

int run_leader_bench(const LeaderBenchOptions& options) {
  return leader_bench_unavailable(
      "this build has no CUDA (nvcc was not found or GEOTRAIN_CUDA=OFF)", options.json);
}

}  // namespace geotrain::bench
