// `geotrain bench codecs`: throughput, wire size and error of every codec, with and without
// error feedback, on gradient-like data, against memcpy (CPU) or a device-to-device copy (CUDA)
// of the same fp32 buffer measured in the same run. Blocks until done; prints to stdout.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace geotrain::bench {

struct CodecBenchOptions {
  std::size_t elements = std::size_t{1} << 24;  // 64 MiB of fp32: well beyond the caches
  int repeats = 5;                              // best of this many timed runs
  std::vector<std::string> specs;               // empty: compression::standard_codec_specs()
  bool json = false;
  bool skip_gpu = false;
  bool skip_cpu = false;  // --no-cpu: the CUDA path alone (a lent GPU's time is short)
};

struct CodecResult {
  std::string name;  // codec spec
  std::string path;  // "cpu" or "cuda"
  std::string data;  // "gaussian" or "heavy_tailed"
  bool error_feedback = false;
  double bits_per_element = 0;
  double encode_gbps = 0;       // fp32 input bytes / encode time
  double decode_gbps = 0;       // fp32 output bytes / decode time
  double encode_vs_memcpy = 0;  // encode time / copy time of the same buffer
  double decode_vs_memcpy = 0;
  // Without EF: ||D(C(x)) - x|| / ||x||. With EF: after R encodes of the same g, the error
  // of the sum of decoded outputs, ||R g - sum D(c_r)|| / ||R g|| = ||e_R|| / ||R g||.
  double rel_error = 0;
  // CUDA only: bytes the encode moves (reads + writes) per second, over the copy's. 0 on CPU.
  double encode_bandwidth_vs_copy = 0;
};

int run_codec_bench(const CodecBenchOptions& options);

// Fills `data` with gradient-like values: "gaussian" (N(0, 1e-3^2)) or "heavy_tailed" (Student-t
// with 3 degrees of freedom, scaled alike), from a fixed seed.
// The CPU's model name from /proc/cpuinfo, for benchmark reports.
std::string cpu_name();

void fill_gradient_like(std::vector<float>& data, const std::string& kind, unsigned seed);

}  // namespace geotrain::bench
