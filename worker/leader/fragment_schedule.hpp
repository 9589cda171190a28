// FragmentSchedule: when each streaming fragment is exchanged and merged (docs/training.md,
// "Streaming fragments"): H local steps a round, P fragments staggered by H / P (the last at every
// round boundary), each merged `delay` steps after its push. One value that the leader's
// StreamingSync, every rank of the native trainer and the Python API (geotrain.OuterSync) follow,
// so that the other ranks of a region take part in exactly the broadcasts their leader's exchanges
// call for. The leader's copy comes from the servers' fragment count (LeaderSession::connect);
// the other ranks receive it from their leader. Plain value; no state.
#pragma once

#include <cstdint>
#include <optional>

#include "worker/leader/overlap_merge.hpp"  // OverlapMode

namespace geotrain::worker {

struct FragmentSchedule {
  uint32_t local_steps = 1;  // H
  uint32_t fragments = 1;    // P, at most H
  uint32_t delay = 0;        // steps from a fragment's push to its merge; 0: blocking; <= H

  // worker.fragment_delay as `written`, or the default: 0 without overlap, H / P with it (one
  // round late without fragments).
  static uint32_t merge_delay(OverlapMode mode, uint32_t local_steps, uint32_t fragments,
                              std::optional<uint32_t> written);

  // Fragment `fragment` is pushed after local step `step` (1-based over the run:
  // (round - 1) * H + h + 1).
  bool due(uint64_t step, uint32_t fragment) const;
  // The leader's exchanges change the parameters after `step`: a fragment is due, or merged
  // `delay` steps after one (a region's other ranks then take the leader's broadcast).
  bool changes_after(uint64_t step) const;

  bool operator==(const FragmentSchedule&) const = default;
};

}  // namespace geotrain::worker
