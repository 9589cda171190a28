// check_global_model(): whether every copy of the global model a run ended with is the same, bit
// for bit (summary.json's global_model_identical and global_model_check; `geotrain chaos
// --verify`). Each server logs, when it releases a shard's flush at the end of a run, the hash
// of the shard's values (server-<region>.metrics.jsonl, `flush` with `hash`); each leader logs
// the hashes of the values its final pulls brought (worker-<region>-0.metrics.jsonl, `flush`
// with `shard_hashes`). The copies are identical when every region holds the global model and,
// for every shard, its hash is the same in every region and on its server.
//
// Reads the run folder's files only; never throws for what they hold (a file written by a build
// from before the hashes makes the answer unknown).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::launcher {

struct GlobalModelCheck {
  // true: identical everywhere; false: a region lacks the global model, or two copies differ;
  // nullopt: nothing to compare (no region flushed: the run stopped early; or no hashes).
  std::optional<bool> identical;
  std::string detail;  // what was compared, or the first differences found
};

// `regions`: the run's regions (their leaders' files are worker-<region>-0.metrics.jsonl).
GlobalModelCheck check_global_model(const std::filesystem::path& run_dir,
                                    const std::vector<std::string>& regions);

}  // namespace geotrain::launcher
