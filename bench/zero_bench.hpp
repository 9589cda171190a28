// `geotrain bench zero`: ZeRO inside a region (worker/training/zero_shards.hpp), sharded against
// unsharded in one run. A region of k CPU workers, threads of this process joined by Gloo over
// 127.0.0.1 (each with its own CPU backend, LocalStep and host StepEngine, as the trainer builds
// them), trains the model with AdamW at stage 0, 1 and 2 in alternating turns (so that a machine's
// drift falls on every stage alike), each on random tokens (GPT) or inputs (MLP) from a fixed seed
// per worker. Reports per (k, stage): the optimizer-state bytes the most loaded worker holds, and
// over stage 0's; the region's tokens/s over the timed steps, and over stage 0's. The targets
// (issue 52): state <= 1/k + 5% of unsharded, tokens/s >= 0.95 x unsharded.
// The workers share this machine's cores: with k above the cores, each one's step is slower than
// on its own machine, alike for every stage. Blocks until done; prints a table or one JSON
// document to stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::bench {

struct ZeroBenchOptions {
  std::string model = "gpt-small";  // a GPT preset or an MLP spec
  uint32_t seq_len = 0;             // GPT: overrides the preset's T when > 0
  uint32_t batch = 4;               // per worker
  std::vector<uint32_t> workers{2, 4};
  int steps = 3;         // timed steps per turn
  int warmup_steps = 1;  // untimed first steps of each turn
  int turns = 2;         // rounds of stage 0, 1, 2
  bool json = false;
};

struct ZeroBenchRow {
  uint32_t workers = 0, stage = 0;
  uint64_t parameters = 0;
  uint64_t optimizer_state_bytes = 0;  // the most any one worker holds
  double state_ratio = 0;              // over stage 0's at the same k
  double tokens_per_s = 0;             // the region's, over all turns' timed steps
  double speed_ratio = 0;              // over stage 0's at the same k
  double last_loss = 0;                // worker 0's, a sanity check
};

std::vector<ZeroBenchRow> measure_zero(const ZeroBenchOptions& options);
int run_zero_bench(const ZeroBenchOptions& options);

}  // namespace geotrain::bench
