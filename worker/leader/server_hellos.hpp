// ServerHellos: what every server's hello reply tells a region leader at connect() (RegionSync,
// worker/leader/region_sync.hpp): the shards each server owns (where they lie, their fragment,
// whether they are still zero or flushed already), the round each server expects next from this
// region, whether it offers the flush, and the streaming layout the servers agree on. Checked as
// a whole before the leader uses any of it: the shards cover the table exactly once, their ids
// are in range, the servers agree on the layout (InputError naming what is wrong otherwise).
//
// Blocking: greet() waits up to `timeout` for each server's answer, in the links' order.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "worker/leader/server_links.hpp"
#include "worker/leader/shard.hpp"

namespace geotrain::worker {

// The streaming layout a server's hello names (wire::HelloReply::fragments).
struct FragmentLayout {
  uint32_t fragments;
  bool critical;       // plus the critical tensors' own fragment
  std::string server;  // the region of the server that said it
  std::string describe() const;
};

struct ServerHellos {
  std::vector<LeaderShard> shards;       // in the links' order, each server's as it listed them
  std::vector<uint64_t> next_round;      // per link: the round it expects next from this region
  std::optional<FragmentLayout> layout;  // none when no server said (an older build)

  // The earliest round any server expects next.
  uint64_t first_round() const;
  // The servers' streaming layout becomes `config`'s (fragments, critical_fragment; logged where
  // the config said otherwise), and the shards must lie in that many fragments (InputError).
  void adopt_layout(SyncConfig& config) const;
};

// Sends `hello` to every link and reads the answers; records in each link whether it offers the
// flush. Shards are cut into segments as `segments` says (LeaderShard).
ServerHellos greet(ServerLinks& links, const wire::Hello& hello, const ParamTable& layout,
                   Segments segments, std::chrono::milliseconds timeout);

}  // namespace geotrain::worker
