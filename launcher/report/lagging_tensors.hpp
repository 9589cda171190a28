// Choosing the tensors that may lag, by measurement: the leaders' `tensor_motion` events
// (worker/leader/tensor_motion.hpp) of a finished run say how far each tensor moves in a round
// against its size. The tensors that move least lose least by arriving a round or two late, so
// they go asynchronously under the staleness bound; the rest stay critical (`model.critical`).
// `geotrain critical RUN_DIR` prints the choice (docs/training.md, "Choosing the tensors that may
// lag").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace geotrain::launcher {

struct TensorMotionRow {
  std::string name;
  uint64_t elements = 0;
  double relative_update = 0.0;
};

// The tensors of the run in `run_dir`, each with its relative update averaged over the leaders'
// `tensor_motion` events (worker-<region>-0.metrics.jsonl), in the table's order. InputError when
// no leader wrote one (a build before 2026-11-29, or a run that ended before its exchanges did),
// naming the folder, or when the leaders' tables differ.
std::vector<TensorMotionRow> read_tensor_motion(const std::filesystem::path& run_dir);

struct LagChoice {
  std::vector<std::string> lagging;   // least motion first
  std::vector<std::string> critical;  // in the table's order
  uint64_t lagging_elements = 0;
  uint64_t total_elements = 0;
};

// The tensors that move least, in increasing relative update, as long as together they hold at
// most `share` of the elements (the first that would pass it ends the choice: the lagging set is
// always a prefix of the ranking); ties keep the table's order. InputError for a share outside
// [0, 1].
LagChoice choose_lagging(const std::vector<TensorMotionRow>& rows, double share);

}  // namespace geotrain::launcher
