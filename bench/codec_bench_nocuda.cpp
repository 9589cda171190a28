#include "bench/codec_bench_cuda.hpp"

namespace geotrain::bench {

CudaBenchReport run_cuda_codec_bench(std::size_t, int) {
  CudaBenchReport r;
  r.note = "this build has no CUDA (nvcc was not found or GEOTRAIN_CUDA=OFF)";
  return r;
}

}  // namespace geotrain::bench
