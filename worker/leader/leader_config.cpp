#include "worker/leader/leader_config.hpp"

#include "core/error.hpp"
#include "wire/security_config.hpp"

namespace geotrain::worker {

SyncConfig leader_sync_config(const WorkerConfig& c, const std::string& region,
                              uint64_t tokens_per_round) {
  c.region_index(region);  // InputError naming the allowed regions
  SyncConfig sc;
  sc.region = region;
  for (const auto& r : c.regions) {
    sc.servers.push_back(
        {r, c.server_endpoint(region, r), wire::curve_client(c.security, region, r)});
    if (!c.standby.on) continue;
    const auto standby = c.standby.endpoints.find(r);
    GT_REQUIRE(standby != c.standby.endpoints.end(),
               "server.standby.endpoints has no entry for region '{}' (where the standby of its "
               "shards listens)",
               r);
    sc.servers.back().standby = standby->second;
  }
  sc.takeover_after = c.standby.takeover_after;
  sc.critical_codec = c.critical_codec;
  sc.noncritical_codec = c.noncritical_codec;
  sc.error_feedback_decay = c.error_feedback_decay;
  sc.tensor_segments = c.tensor_segments;
  sc.staleness_bound = c.staleness_bound;
  sc.fragments = c.fragments;
  sc.critical_fragment = c.critical_fragment();
  sc.tokens_per_round = tokens_per_round;
  sc.timeout = c.timeout;
  sc.shard_wait = c.shard_wait;
  sc.shard_wait_auto = c.shard_wait_auto;
  sc.streams_per_server = c.streams_per_server;
  sc.link_mbps = c.link_mbps;
  sc.socket_buffer_bytes = static_cast<int>(c.socket_buffer_kib) * 1024;
  return sc;
}

StreamingConfig leader_streaming_config(const WorkerConfig& c, const std::string& region) {
  StreamingConfig stc;
  stc.local_steps = c.local_steps;
  stc.fragments = c.fragments;
  stc.delay = c.merge_delay();
  stc.written_delay = c.fragment_delay;
  stc.mode = c.overlap_mode;
  stc.outer = c.outer;
  stc.regions = static_cast<uint32_t>(c.regions.size());
  // Time-budgeted rounds: a push stands for the steps actually taken since the last.
  if (c.round_time_ms > 0) stc.tokens_per_step = c.samples_per_step(region);
  return stc;
}

}  // namespace geotrain::worker
