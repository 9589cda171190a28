// Wire messages as plain structs, and their Cap'n Proto encoding in frame 0.
//
// Owns nothing beyond the structs. encode_header() builds frame 0; decode_header() reads it
// with bounded traversal (ReaderOptions) and converts every field into the structs below. It
// checks the protocol version and the structure; the meaning of each field (shard ranges,
// codecs, sizes against frames, table hash) is checked where it is used, by the server.
// Failures throw WireError (an InputError with an ErrorCode and the request id when it could be
// read). Pure functions: nothing blocks, everything is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/span.hpp"
#include "wire/frame.hpp"

namespace geotrain::wire {

// 2: a segment's codec and element count are said only by its payload's header (docs/protocol.md,
// "Versions"); a peer of another version is refused (badVersion) with both numbers named.
inline constexpr uint16_t kProtocolVersion = 2;
// Largest frame 0 accepted, in 8-byte words (headers are a few hundred bytes).
inline constexpr size_t kMaxHeaderWords = size_t{1} << 16;
// Requests of one peer that a server holds waiting at once (a push beyond the staleness gate, a
// pull of a round not released yet, a key-value get of a key not set yet); one more is refused
// with `busy`. Clients keep at most this many waiting per server (worker/leader/region_sync.hpp).
inline constexpr size_t kMaxWaitingPerPeer = 4;
// The same for a server that holds `shards` shards (all fragments): kMaxWaitingPerPeer, or a push
// and its pull for each of them (server.shards_per_region: a server holding a larger share of
// the model), whichever is more, so that a leader sends every pull right behind its push.
inline constexpr size_t max_waiting_per_peer(size_t shards) {
  return 2 * shards > kMaxWaitingPerPeer ? 2 * shards : kMaxWaitingPerPeer;
}

enum class ErrorCode : uint16_t {
  malformed,
  bad_version,
  unregistered,
  bad_table_hash,
  bad_shard,
  bad_range,
  bad_codec,
  bad_round,
  bad_payload,
  too_large,
  busy,
  unknown_region,
  internal,
  not_serving,  // a standby whose primary is alive (docs/server.md, "Standby shards")
  replaced,     // a primary whose standby took its shards over
};
const char* error_code_name(ErrorCode code);

class WireError : public InputError {
 public:
  WireError(ErrorCode code, const std::string& message, uint64_t request_id = 0)
      : InputError(message), code_(code), request_id_(request_id) {}
  ErrorCode code() const { return code_; }
  uint64_t request_id() const { return request_id_; }

 private:
  ErrorCode code_;
  uint64_t request_id_;
};

// One payload frame of a push or a pull reply. What the payload holds (its codec, its element
// count) is said by the payload's own header (compression/payload.hpp), in one place: the segment
// covers [offset, offset + the payload's elements) of the shard.
struct Segment {
  uint64_t offset = 0;  // relative to the shard
  uint64_t bytes = 0;   // size of this segment's payload frame
};

struct Hello {
  std::string region;
  uint16_t protocol_version = kProtocolVersion;
  uint64_t table_hash = 0;
  std::vector<std::string> capabilities;
};
struct ShardInfo {
  uint32_t id = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  // The shard's values are still the zeros every server starts from (no delta applied and no
  // checkpoint restored), and the server has started this region's downlink from them: a fresh
  // leader sets its base to its origin instead of pulling zeros across the WAN.
  bool zero_values = false;
  // The streaming fragment the shard belongs to (server/shard_map.hpp): 0 without streaming.
  uint32_t fragment = 0;
  // This region flushed the shard before this hello (a leader restarted after the end of its
  // run): it pushes no more rounds there; its final pull is answered (docs/protocol.md).
  bool flushed = false;
  // The round this region pushes next to this shard (0: not said; HelloReply::next_round then):
  // streaming fragments of one server may be at different rounds.
  uint64_t next_round = 0;
};
struct HelloReply {
  std::string server_region;
  std::vector<ShardInfo> shards;
  uint64_t next_round = 1;
  uint32_t heartbeat_ms = 0;
  std::vector<std::string> capabilities;
  // The servers' streaming layout: P fragments (0: not said), plus the critical tensors' own
  // fragment (index P) when critical_fragment. The leaders take it (worker/leader/region_sync.hpp).
  uint32_t fragments = 0;
  bool critical_fragment = false;
};
struct Heartbeat {};
struct Push {
  uint32_t shard = 0;
  uint64_t round = 0;
  uint64_t base_version = 0;
  std::vector<Segment> segments;
  uint64_t tokens = 0;  // tokens (samples) the delta represents, for merging; 0: unknown
  // The end of a run (docs/protocol.md, "The flush"): the segments are the progress the region
  // did not push yet (not its uplink residual), kept by the server until every live region has
  // flushed it; no segments: nothing owed.
  bool flush = false;
  // `round` may be later than the region's next round: the rounds between are rounds it sits out
  // (a shard deferred past them, docs/protocol.md "Sitting out rounds"); it contributes nothing
  // to them. Without it, a push must name the region's next round.
  bool skip = false;
  // No delta (no segments): the region sits out every round up to `round` at once, those it
  // pushed or sat out already left as they are (a deferred shard whose push of `round` will not
  // come; docs/protocol.md "Sitting out rounds").
  bool absent = false;
};
struct PushReply {
  uint32_t shard = 0;
  uint64_t round = 0;
  uint32_t staleness = 0;
  uint64_t gate_wait_us = 0;
  // The longest silence of a region the pull's round still waits for (protocol.capnp).
  uint32_t awaited_silence_ms = 0;
};
struct PullRequest {
  uint32_t shard = 0;
  uint64_t since_version = 0;
  bool full = false;
  uint64_t min_round = 0;
  // With full: reply once every live region has flushed the shard (the region itself first).
  bool after_flush = false;
};
struct PullReply {
  uint32_t shard = 0;
  uint64_t version = 0;
  uint64_t round = 0;
  bool full = false;
  std::vector<Segment> segments;
  // The latest round a counted region has pushed, or sat out through (its clock), of the shard:
  // a leader further behind it than the staleness bound sits out the rounds up to it.
  uint64_t frontier = 0;
};
struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
};
struct StatsRequest {};
struct StatsReply {
  std::string json;
};
struct CheckpointRequest {};
struct CheckpointReply {
  uint64_t round = 0;
};
struct Shutdown {};
struct Ack {};
struct Goodbye {};  // a region leaves: it pushes no more rounds
struct KvSet {
  std::string key;
  Bytes value;
};
struct KvGet {
  std::string key;
};
struct KvReply {
  std::string key;
  Bytes value;
};
struct KvTryGet {  // a KvGet answered at once: KvReply when set, Ack when not
  std::string key;
};
// The bound on HeartbeatReply::answered (a longer list is malformed).
inline constexpr size_t kMaxAnsweredIds = 256;
struct HeartbeatReply {            // a registered region's heartbeat, answered
  std::vector<uint64_t> answered;  // the request ids the server answered it last, newest last
};

// Standby shards (docs/server.md, "Standby shards"): a primary's state of its shards, sent to
// their standby (none: a heartbeat), and handed back by the standby at a TakeBack. Frames, per
// shard in order: the values (fp32), then the momentum when `momentum`.
struct ReplicaShard {
  uint32_t id = 0;
  uint64_t version = 0;
  uint64_t released_round = 0;
  bool momentum = false;
  // The frames are codec payloads of the change since the replica of base_version (to be added),
  // not fp32 values (server.standby.codec).
  bool change = false;
  uint64_t base_version = 0;
};
inline constexpr size_t kMaxReplicaShards = 1024;  // a longer list is malformed
struct Replica {
  std::vector<ReplicaShard> shards;
  uint64_t epoch = 0;  // the sender's takeovers so far
};
struct TakeBack {};  // a restarted primary asks its standby for its shards back

using Body =
    std::variant<Hello, HelloReply, Heartbeat, Push, PushReply, PullRequest, PullReply, Error,
                 StatsRequest, StatsReply, CheckpointRequest, CheckpointReply, Shutdown, Ack, KvSet,
                 KvGet, KvReply, Goodbye, KvTryGet, HeartbeatReply, Replica, TakeBack>;

struct Header {
  uint64_t request_id = 0;
  Body body;
  uint16_t version = kProtocolVersion;  // only tests set anything else
};

// "push", "pullReply", ...: for logs and error messages.
const char* body_name(const Body& body);

Frame encode_header(const Header& header);
// Throws WireError{malformed} for anything that is not a valid header (truncated, misaligned
// size, traversal limit, unknown union member) and WireError{bad_version} for another version.
Header decode_header(const Frame& frame);

// Checks that `frames` (the payload frames, after frame 0) match `segments`: same count, and
// each frame exactly segment.bytes long. Throws WireError{malformed} naming the mismatch.
void check_frames(const std::vector<Segment>& segments, std::span<const Frame> frames,
                  uint64_t request_id);

}  // namespace geotrain::wire
