// FragmentSchedule: when each streaming fragment is exchanged and merged (docs/training.md,
// "Streaming fragments"): H local steps a round, P fragments staggered by H / P (the last at every
// round boundary), each merged `delay` steps after its push. One value that the leader's
// StreamingSync, every rank of the native trainer and the Python API (geotrain.OuterSync) follow,
// so that the other ranks of a region take part in exactly the broadcasts their leader's exchanges
// call for. The leader's copy comes from the servers' fragment count (LeaderSession::connect);
// the other ranks receive it from their leader. Plain value; no state.
//
// Rounds of another length than H (worker.round_time_ms: time-budgeted rounds, docs/training.md
// "Uneven regions"): the fragments keep their places as fractions of the round. A round of k
// steps pushes fragment p after its step k - floor((P - 1 - p) * k / P), which is the step above
// when k = H; a merge still follows its push by `delay` steps, counted over the run, across a round
// boundary if need be, or earlier when its fragment is due again first (a short round with
// overlap: the result is taken in before the next push). StepPosition says where a step falls,
// and MergeCalendar remembers the merges due for the ranks that only follow.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "worker/leader/overlap_merge.hpp"  // OverlapMode

namespace geotrain::worker {

// Where a local step falls: its number over the run (1-based, counting the steps taken, whatever
// each round's length) and its place in its round (1-based, of round_steps).
struct StepPosition {
  uint64_t step = 1;
  uint32_t in_round = 1;
  uint32_t round_steps = 1;
  bool round_end() const { return in_round == round_steps; }
};

struct FragmentSchedule {
  uint32_t local_steps = 1;  // H
  uint32_t fragments = 1;    // P, at most H
  uint32_t delay = 0;        // steps from a fragment's push to its merge; 0: blocking; <= H

  // worker.fragment_delay as `written`, or the default: 0 without overlap, H / P with it (one
  // round late without fragments).
  static uint32_t merge_delay(OverlapMode mode, uint32_t local_steps, uint32_t fragments,
                              std::optional<uint32_t> written);

  // The position of local step `step` (1-based over the run) in rounds of H steps.
  StepPosition position(uint64_t step) const;

  // Fragment `fragment` is pushed after local step `step` (1-based over the run:
  // (round - 1) * H + h + 1), in rounds of H steps.
  bool due(uint64_t step, uint32_t fragment) const;
  // The same in a round of any length (due(step, p) == due(position(step), p)).
  bool due(const StepPosition& at, uint32_t fragment) const;
  // Some fragment is pushed after the step.
  bool any_due(const StepPosition& at) const;
  // The leader's exchanges change the parameters after `step`: a fragment is due, or merged
  // `delay` steps after one (a region's other ranks then take the leader's broadcast). Rounds of
  // H steps; MergeCalendar for rounds of any length.
  bool changes_after(uint64_t step) const;

  bool operator==(const FragmentSchedule&) const = default;
};

// changes_after() for rounds of any length: it remembers the steps at which pushes made so far
// are merged. One per rank; feed it every step in order.
class MergeCalendar {
 public:
  struct Merge {
    uint64_t step = 0;  // after which a push made earlier is merged
    uint32_t fragment = 0;
    bool operator==(const Merge&) const = default;
  };

  explicit MergeCalendar(FragmentSchedule schedule) : schedule_(schedule) {}
  void set_schedule(FragmentSchedule schedule) { schedule_ = schedule; }
  // The merges due, in the order of their pushes: what a rank that joins its region's group
  // takes from the leader (a restarted worker's calendar is empty, its leader's is not), and a
  // leader started again gives its members (empty: it has no exchange in flight).
  std::vector<Merge> pending() const { return {merges_.begin(), merges_.end()}; }
  void restore(const std::vector<Merge>& merges) { merges_.assign(merges.begin(), merges.end()); }
  // Whether the leader's exchanges change the parameters after the step at `at`.
  bool changes_after(const StepPosition& at);

 private:
  FragmentSchedule schedule_;
  std::deque<Merge> merges_;  // in the order of their pushes
};

}  // namespace geotrain::worker
