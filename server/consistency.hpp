// Consistency policy of the synchronous (critical) rounds: when a shard's round is released, and
// how the deltas merged into it are weighted (docs/protocol.md, "Consistency").
//
//   ssp     release round t once every live region has pushed it (bounded staleness: the gate
//           lets a region run at most s rounds ahead of the slowest live one). Today's default.
//   quorum  release round t once every live region has pushed it, or once at least `quorum`
//           regions have pushed it and `grace` has passed since its first push (Decoupled
//           DiLoCo, arXiv 2604.21428). A region whose round-t push arrives after t was released
//           is late: its delta is folded into the oldest unreleased round. The gate then counts
//           from the released round: a region may run at most s rounds ahead of
//           max(slowest live clock, released round), so a slow region holds nobody back.
//
// Merge weights: `equal` gives every delta weight 1; `tokens` gives each the tokens (samples) its
// push says it represents, and falls back to equal weights for a merge where some delta's tokens
// are unknown (0). Merged = sum_i w_i delta_i / sum_i w_i.
// Plain value types, parsed by server/config.cpp; no state, nothing blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace geotrain::server {

enum class ConsistencyPolicy { ssp, quorum };
enum class MergeWeighting { equal, tokens };

struct ConsistencySettings {
  ConsistencyPolicy policy = ConsistencyPolicy::ssp;
  // quorum: regions whose push of a round releases it once the grace window has expired, as a
  // count in [1, regions] (a fraction in the config is resolved against the regions at parsing).
  uint32_t quorum = 1;
  std::chrono::milliseconds grace{500};  // quorum: measured from the round's first on-time push
  MergeWeighting weighting = MergeWeighting::equal;

  bool is_quorum() const { return policy == ConsistencyPolicy::quorum; }
  std::string describe() const {
    const char* w = weighting == MergeWeighting::tokens ? "tokens" : "equal";
    if (!is_quorum()) return std::string("ssp, ") + w + " weights";
    return "quorum " + std::to_string(quorum) + " after " + std::to_string(grace.count()) +
           " ms, " + w + " weights";
  }
};

}  // namespace geotrain::server
