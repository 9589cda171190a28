// RoundBudget: how many local steps a region takes in a time-budgeted round (worker.round_time_ms;
// docs/training.md, "Uneven regions"). A region takes the steps that fit in the budget at its own
// pace, so that every region of an uneven fleet reaches the round's exchange at about the same
// time, busy until then, instead of the fast ones waiting for the slowest (fixed H).
//
// The pace is the mean time of the steps of the round before (each step from its start to the end
// of its optimizer step, without the exchanges after it; on emulated hardware its emulated time,
// or its real work when that overran), so a region
// that slows down (a brownout) or recovers is planned at its new pace within two rounds. The
// count is budget / pace rounded to the nearest step, the difference carried to the next round
// the way error feedback carries a codec's: a region at a third of the budget's pace takes
// 3, 2, 3, 3, 2, 3 ... steps (8/3 a round on average), not 3 every round (12% late) or 2 (25%
// idle), and a region a hair slower than the budget's pace (its steps' own overheads) still takes
// H. Each round's count is between 1 and max_steps; the carry stays within half a step.
//
// Pure arithmetic; the caller measures and broadcasts the count to its region. Not thread-safe.
#pragma once

#include <cstdint>

namespace geotrain::worker {

class RoundBudget {
 public:
  // `budget_s` > 0; `max_steps` >= 1; `first_steps`: the first round's count, before any step was
  // measured (a pace known in advance, such as an emulated step time, gives budget / pace
  // instead: `known_pace_s` > 0).
  RoundBudget(double budget_s, uint32_t max_steps, uint32_t first_steps, double known_pace_s = 0);

  // One step of the round under way took `seconds`.
  void record_step(double seconds);
  // The count of the next round, from the pace of the steps recorded since the last call.
  uint32_t plan();
  // The pace plan() used last (0 before a pace was known).
  double pace_s() const { return pace_s_; }

 private:
  double budget_s_;
  uint32_t max_steps_;
  uint32_t first_steps_;
  double pace_s_ = 0;
  double carry_ = 0;  // steps owed (or overdrawn) by earlier rounds' rounding, in [-0.5, 0.5)
  double recorded_s_ = 0;
  uint32_t recorded_ = 0;
};

}  // namespace geotrain::worker
