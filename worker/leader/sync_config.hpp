// What a region leader's exchange is configured with (SyncConfig: worker.* keys through
// worker/leader/leader_config.cpp) and what it reports (RoundReport per exchange, FlushReport for
// the end of a run). Plain structs (worker/leader/region_sync.hpp does the work).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "core/fragments.hpp"
#include "worker/leader/server_link.hpp"

namespace geotrain::worker {

struct SyncConfig {
  std::string region;            // this region's name, as in the config's `regions`
  using Server = ServerAddress;  // worker/leader/server_link.hpp
  std::vector<Server> servers;   // every region's server (the leader talks to all of them)
  // Each class's codec by round (compression/codec_schedule.hpp): a push of round t (this
  // region's count, rounds_) encodes with codec_at(t); at a switch the residuals are kept.
  compression::CodecSchedule critical_codec = "onebit";
  compression::CodecSchedule noncritical_codec = "int8";
  float error_feedback_decay = 1.0f;  // worker.error_feedback.decay, for both classes
  // worker.chunk_align: tensor. Every tensor is a segment of its own (its own payload and EF
  // stream), so that a codec's chunks restart at each tensor boundary: a LayerNorm gain no longer
  // shares a chunk scale with the weight matrix beside it. The servers decode any segmentation
  // (each payload names its codec and count); the cost is a payload header (40 bytes) and at
  // most one partial chunk per tensor. Off: one segment per run of tensors of one class.
  bool tensor_segments = false;
  uint32_t staleness_bound = 0;
  // Streaming fragments (worker.fragments); connect() replaces it with the servers' count.
  uint32_t fragments = 1;
  // worker.stream_critical false with fragments > 1: the servers put the critical tensors in a
  // fragment of their own, index `fragments` (WorkerConfig::critical_fragment()).
  bool critical_fragment = false;
  // Fragments in the servers' shard map: P, or P + 1 with the critical fragment.
  uint32_t fragment_count() const { return fragments + (critical_fragment ? 1 : 0); }
  std::chrono::milliseconds timeout{60'000};  // per reply
  // worker.shard_wait_ms: the longest an exchange that may defer waits for a server (see above);
  // 0: never defer.
  std::chrono::milliseconds shard_wait{0};
  // worker.shard_wait_ms: auto: shard_wait is where the wait starts, and it then follows the
  // region's healthy exchanges (worker/leader/shard_wait.hpp).
  bool shard_wait_auto = false;
  std::chrono::milliseconds heartbeat{1'000};
  // server.standby.takeover_after_ms, for servers with a standby (ServerAddress::standby): a
  // server silent this long while replies are awaited is lost, and its standby asked.
  std::chrono::milliseconds takeover_after{2'000};
  // worker.streams_per_server: connections to each server, messages striped over them
  // (wire::ChannelOptions::lanes); 0 (auto): connect() measures the round trip to each server
  // first and asks wire::streams_for_link with link_mbps and this host's TCP window.
  // worker.socket_buffer_kib in bytes (0: the OS default).
  uint32_t streams_per_server = 1;
  double link_mbps = 1000;
  int socket_buffer_bytes = 0;
  // Tokens (samples) the region trains on between two pushes of a shard, sent with every push
  // so that a server with server.consistency.weighting: tokens weighs this region's delta by
  // them (docs/protocol.md); 0: unknown, weighted like every other delta.
  uint64_t tokens_per_round = 0;
};

struct RoundReport {
  uint64_t round = 0;
  uint32_t fragment = 0;        // the fragment exchanged (0 when the whole table was)
  uint64_t bytes_pushed = 0;    // payload bytes sent (frames after the header)
  uint64_t bytes_pulled = 0;    // payload bytes received
  double push_seconds = 0;      // first push sent -> last push reply
  double pull_seconds = 0;      // pulls sent after the push replies (a flush's): first -> last
                                // reply; 0 when every pull went right behind its push
  uint32_t max_staleness = 0;   // the largest staleness a server reported for our pushes
  uint64_t gate_wait_us = 0;    // the longest time a push waited at a server's gate
  uint64_t released_round = 0;  // the oldest round released among the pulled shards
  // StreamingSync: how long the caller's thread waited for this exchange to come back (a
  // background one at its merge, a blocking one throughout); 0 from RegionSync itself.
  double merge_wait_seconds = 0;
  // Deferred shards: the ranges of this fragment whose exchange is still in flight after this
  // exchange (base unchanged there: keep them local, merge them later), and how many shards
  // deferred earlier were merged (StreamingSync counts those take_ready() merged).
  std::vector<ElementRange> deferred;
  uint32_t late_shards = 0;
  // How long this exchange would wait for a server before deferring its shards (0: it would
  // not defer): worker.shard_wait_ms, or what `auto` made of it.
  double shard_wait_seconds = 0;
  // Of the shards deferred in this exchange, those deferred without waiting the shard wait:
  // their server held the round for a region it had not heard from for two heartbeats (cut off
  // from it, or its leader dead; docs/training.md, "Deferred shards").
  uint32_t held_for_silent = 0;
};

// What the flush at the end of a run moved (RegionSync::flush).
struct FlushReport {
  uint64_t bytes_pushed = 0;   // the flush pushes' payload: fp32, only the segments that owed
  uint64_t bytes_pulled = 0;   // the final pulls' payload: every shard's full fp32 values
  double push_seconds = 0;     // first flush sent -> last flush answered
  double pull_seconds = 0;     // first final pull sent -> last answered (the wait for the others)
  uint32_t segments_owed = 0;  // segments that owed something (pushed)
  // Servers that lost this region during the flush (a restart from a checkpoint): rejoined, and
  // what they no longer held flushed again; the bytes and seconds above include those attempts.
  uint32_t rejoins = 0;
  // Each shard's id and the hash of the global values pulled for it (core/values_hash.hpp), in
  // the shards' order: what `geotrain run` compares with the servers' (global_model_identical).
  std::vector<std::pair<uint32_t, uint64_t>> shard_hashes;
};

}  // namespace geotrain::worker
