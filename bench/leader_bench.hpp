// `geotrain bench leader`: one region leader's push and pull work for a device-resident worker,
// as the leader does it today on the host and as it does it on the device (issue 24, item 3),
// measured in the same run on the same GPU:
//   host push:   the parameters device-to-host (the trainer's to_host), delta = local - base
//                and the codec with error feedback on the host (RegionSync::send_push);
//   device push: delta on the device and DeviceFeedback's encode; only the payload crosses PCIe;
//   host pull:   the pulled payload decoded into base on the host, the parameters host-to-device
//                (the trainer's to_device after the merge);
//   device pull: DeviceDecoder's decode_add into base on the device.
// Every push checks that both paths give the same payload bytes. Needs a CUDA device; without
// one (or in a build without CUDA) it says so and exits 0. Prints a table or one JSON document.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::bench {

struct LeaderBenchOptions {
  uint64_t elements = 124'439'808;  // GPT-2 124M's parameter count
  uint32_t segments = 1;            // payloads per push (tensor-aligned chunks make ~150)
  std::vector<std::string> codecs = {"onebit", "onebit:scale=rms", "int8", "topk:ratio=0.01"};
  int repeats = 5;  // best of this many rounds
  bool json = false;
};

int run_leader_bench(const LeaderBenchOptions& options);

// What the bench prints when it cannot run (no CUDA in the build, or no device): why, and exit 0.
inline int leader_bench_unavailable(const char* note, bool json) {
  if (json)
    fmt::print("{{\"cuda_device\": null, \"cuda_note\": \"{}\"}}\n", note);
  else
    fmt::print("geotrain bench leader: {}\n", note);
  return 0;
}

}  // namespace geotrain::bench
