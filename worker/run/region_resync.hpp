// resync_from: after a region's group re-formed (worker/region/region_group.hpp), every member
// takes one member's state, the leader's, so that the ranks are identical again whatever
// collective each was in when the group broke (one may have finished a step another abandoned),
// and a restarted worker has the region's state from a live peer rather than from a snapshot on
// disk; a leader started again takes it from the first member that outlived it.
//
// What goes: where the source is in the run (RegionPosition, with the merges its exchange
// calendar has due: every rank takes part in their broadcasts) and its training state: parameters,
// the optimizer's moments and step count, the anomaly guard's loss window (a
// WorkerCheckpointState's, without residuals: only the leader exchanges with the servers).
// Blocking and collective: every member calls it, at the same point, right after the regroup.
// InputError on every member when the source's sizes are not some member's (another model or
// optimizer), before any state is sent.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/leader/fragment_schedule.hpp"
#include "worker/region/communicator.hpp"
#include "worker/run/worker_checkpoint.hpp"

namespace geotrain::worker {

struct RegionPosition {
  uint64_t round = 0;                 // the round in progress
  uint32_t done = 0;                  // its local steps done
  uint32_t steps = 0;                 // its step count; 0: not planned yet
  uint64_t steps_taken = 0;           // local steps over the run (the exchange calendar's clock)
  uint64_t micro_batches = 0;         // data position
  uint32_t fragments = 1, delay = 0;  // the fragment schedule the leader's servers set
  std::vector<MergeCalendar::Merge> merges{};  // due (MergeCalendar::pending), at most 65536
  bool operator==(const RegionPosition&) const = default;
};

struct RegionState {
  RegionPosition at;
  // params, optimizer_m, optimizer_v, optimizer_steps, steps (the schedule's), guard_losses,
  // guard_skipped; the rest is not sent.
  WorkerCheckpointState state;
};

// Rank `root`'s `mine` on every member (the root's own comes back unchanged).
RegionState resync_from(Communicator& comm, int root, RegionState mine);

}  // namespace geotrain::worker
