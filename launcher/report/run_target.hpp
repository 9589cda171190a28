// RunTarget: what reaching a run's target means, from run.target_accuracy (classifiers: an
// eval with test_accuracy >= accuracy) or run.target_val_bpb (language models: an eval with
// val_bpb <= val_bpb; lower is better). At most one is set: the run settings refuse both, and
// RunMonitor asserts it. Plain value; header-only.
#pragma once

#include <optional>

namespace geotrain::launcher {

struct RunTarget {
  std::optional<double> accuracy;
  std::optional<double> val_bpb;

  bool any() const { return accuracy || val_bpb; }
  // Whether an eval event's fields meet the target (false when no target is set).
  bool reached_by(std::optional<double> test_accuracy, std::optional<double> bpb) const {
    if (accuracy) return test_accuracy && *test_accuracy >= *accuracy;
    if (val_bpb) return bpb && *bpb <= *val_bpb;
    return false;
  }
};

}  // namespace geotrain::launcher
