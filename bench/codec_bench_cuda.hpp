// The CUDA half of `geotrain bench codecs`. Built from codec_bench_cuda.cu when CUDA is on and
// from codec_bench_nocuda.cpp otherwise; `note` says why nothing ran when ran is false.
#pragma once

#include <string>
#include <vector>

#include "bench/codec_bench.hpp"

namespace geotrain::bench {

struct CudaBenchReport {
  bool ran = false;
  std::string note = "not requested";
  std::string device;
  double copy_gbps = 0;  // device-to-device copy of the fp32 buffer, fp32 bytes per second
  std::vector<CodecResult> results;
};

CudaBenchReport run_cuda_codec_bench(std::size_t elements, int repeats);

}  // namespace geotrain::bench
