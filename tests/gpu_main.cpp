// main() for GPU suites: exits with 77 (ctest's SKIP_RETURN_CODE for these suites) when no CUDA
// device is present, so a machine without a GPU reports SKIPPED, never a silent pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "kernels/codec_cuda.cuh"

int main(int argc, char** argv) {
  if (geotrain::kernels::cuda::device_count() == 0) {
    std::printf("no CUDA device: skipping this GPU suite\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
