# geotrain wire protocol, frame 0 of every ZeroMQ multipart message (docs/protocol.md).
# Payload bytes (codec payloads, compression/payload.hpp) travel in frames 1..n, one per
# Segment, in order; each Segment states the exact byte size of its frame.
#
# Versioning: `version` is kProtocolVersion (wire/messages.hpp); a peer speaking another
# version gets an Error{code = badVersion}. New fields are appended with new ordinals only.
@0xa5573a50f31fba87;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("geotrain::wire::schema");

struct Segment {
  offset @0 :UInt64;     # first element, relative to the shard's range
  # Protocol 1 sent the payload's element count and codec here too; since protocol 2 the
  # payload's own header says them (compression/payload.hpp). Never written, never read.
  obsoleteCount @1 :UInt64;
  obsoleteCodec @2 :UInt8;
  bytes @3 :UInt64;      # exact size of the payload frame; it covers [offset, offset + the
                         # payload header's element count)
}

struct Hello {
  region @0 :Text;           # region name, must be one of the configured regions
  protocolVersion @1 :UInt16;
  tableHash @2 :UInt64;      # ParamTable::layout_hash() of the sender
  capabilities @3 :List(Text);  # e.g. "ef-downlink", "full-pull"
}

struct ShardInfo {
  id @0 :UInt32;
  offset @1 :UInt64;     # in the flat parameter buffer
  count @2 :UInt64;
  zeroValues @3 :Bool;   # the shard's values are still the zeros it started from, and the
                         # region's downlink starts from them: it needs no full pull
  fragment @4 :UInt32;   # the streaming fragment it belongs to (0 without streaming; with
                         # worker.stream_critical false, fragment P holds the critical tensors)
  flushed @5 :Bool;      # this region flushed the shard (the end of its run) before this hello:
                         # it pushes no more rounds there, and its final pull is answered
  nextRound @6 :UInt64;  # the round this region pushes next to this shard: with streaming
                         # fragments, shards of one server may be at different rounds (a leader
                         # that died between its fragments' pushes). 0: not said (a server from
                         # before this field): HelloReply.nextRound holds for every shard
}

struct HelloReply {
  serverRegion @0 :Text;
  shards @1 :List(ShardInfo);   # the shards this server owns
  nextRound @2 :UInt64;         # the round this region pushes next
  heartbeatMs @3 :UInt32;       # send a heartbeat at least this often
  capabilities @4 :List(Text);
  # The servers' streaming layout (worker.fragments as they read it): P fragments, plus one of
  # the critical tensors when criticalFragment (worker.stream_critical: false). 0: not said (a
  # server from before this field); the leader then checks the shards against its own count.
  fragments @5 :UInt32;
  criticalFragment @6 :Bool;
}

struct Push {
  shard @0 :UInt32;
  round @1 :UInt64;
  baseVersion @2 :UInt64;       # shard version the delta was computed against
  segments @3 :List(Segment);   # delta = theta_local - theta_base, per segment
  tokens @4 :UInt64;            # tokens (samples) the delta represents; 0 = unknown (equal weight)
  flush @5 :Bool;               # the end of a run: the progress the region did not push yet
                                # (not its uplink EF residual), applied once every live region
                                # has flushed (docs/protocol.md, "The flush")
  skip @6 :Bool;                # round may be later than the region's next: it sits out the
                                # rounds between (contributes nothing to them), so that its
                                # rounds keep one offset on every server (docs/protocol.md,
                                # "Sitting out rounds")
  absent @7 :Bool;              # no delta: the region sits out every round up to and including
                                # `round` now (a shard it deferred, whose push of this round
                                # will not come), so that the others' rounds there are released
                                # without waiting for it; no segments; a round it already pushed
                                # or sat out is no change (docs/protocol.md, "Sitting out rounds")
}

struct PushReply {
  shard @0 :UInt32;
  round @1 :UInt64;
  staleness @2 :UInt32;         # tau used to weight the non-critical part
  gateWaitUs @3 :UInt64;        # time this push waited at the staleness gate
  awaitedSilenceMs @4 :UInt32;  # the round this push's pull waits for (round - the staleness
                                # bound) still waits for regions that have neither pushed nor
                                # sat it out: the longest time the server has heard nothing from
                                # one of them (no message at all), in ms; 0 when it waits for none,
                                # under the quorum policy, and from an older server
                                # (docs/protocol.md, "A round held for a silent region")
}

struct PullRequest {
  shard @0 :UInt32;
  sinceVersion @1 :UInt64;      # the version this region last received
  full @2 :Bool;                # full fp32 values instead of a compressed change
  minRound @3 :UInt64;          # reply only once rounds <= minRound are released (0: now)
  afterFlush @4 :Bool;          # reply (full values) only once every live region has flushed
                                # the shard; the region must have flushed it itself
}

struct PullReply {
  shard @0 :UInt32;
  version @1 :UInt64;           # version the region holds after applying this reply
  round @2 :UInt64;             # synchronous rounds released so far
  full @3 :Bool;                # segments are values, not changes
  segments @4 :List(Segment);
  frontier @5 :UInt64;          # the latest round a counted region has pushed (or sat out
                                # through) of this shard: a leader further behind than the
                                # staleness bound sits out the rounds up to it (docs/protocol.md,
                                # "Sitting out rounds"); 0 from an older server
}

enum ErrorCode {
  malformed @0;       # frame 0 is not a valid header, or frames do not match it
  badVersion @1;
  unregistered @2;
  badTableHash @3;
  badShard @4;
  badRange @5;
  badCodec @6;
  badRound @7;
  badPayload @8;
  tooLarge @9;
  busy @10;
  unknownRegion @11;
  internal @12;
  notServing @13;     # a standby asked to serve while its primary is alive (docs/server.md,
                      # "Standby shards"): the asker tries the primary
  replaced @14;       # a primary whose standby took its shards over: it must restart and take
                      # them back (TakeBack) before it serves again
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;             # names the field and the value
}

# Standby shards (docs/server.md, "Standby shards"): a primary's state of one shard, sent to its
# standby. Frames, per shard in order: the values (count x fp32, little-endian), then the momentum
# when `momentum` (the same size); with `change`, a payload of each's change instead.
struct ReplicaShard {
  id @0 :UInt32;
  version @1 :UInt64;
  releasedRound @2 :UInt64;
  momentum @3 :Bool;
  # The frames are codec payloads (compression/payload.hpp) of the change since the replica of
  # `baseVersion`, to add to it (server.standby.codec), not the fp32 values themselves.
  change @4 :Bool;
  baseVersion @5 :UInt64;
}

struct Replica {
  shards @0 :List(ReplicaShard);  # none: a heartbeat of the primary
  epoch @1 :UInt64;               # the sender's takeovers so far (one more at each promotion)
}

struct KeyValue {
  key @0 :Text;
  value @1 :Data;
}

struct Header {
  version @0 :UInt16;
  requestId @1 :UInt64;         # echoed in the reply
  union {
    hello @2 :Hello;
    helloReply @3 :HelloReply;
    heartbeat @4 :Void;
    push @5 :Push;
    pushReply @6 :PushReply;
    pull @7 :PullRequest;
    pullReply @8 :PullReply;
    error @9 :Error;
    statsRequest @10 :Void;
    statsReply @11 :Text;       # one JSON object (server metrics)
    checkpoint @12 :Void;
    checkpointReply @13 :UInt64;  # round of the checkpoint written
    shutdown @14 :Void;
    ack @15 :Void;              # heartbeat and shutdown replies
    # Reserved for the Gloo/NCCL rendezvous store: set / get by key.
    kvSet @16 :KeyValue;
    kvGet @17 :Text;
    kvReply @18 :KeyValue;
    # A region leaves (its leader finished training): the server stops counting it at once, as if
    # it had been declared dead, so that no round waits dead_after for it. Answered with ack.
    goodbye @19 :Void;
    # kvGet that does not wait: answered at once with kvReply when the key is set, with ack when
    # it is not (a region's leader looks for workers asking to rejoin its group).
    kvTryGet @20 :Text;
    # The answer to a registered region's heartbeat: the ids of the requests the server answered
    # it last (at most kMaxAnsweredIds, newest last). A leader that awaits a reply the server says
    # it sent, and has not received any of it, knows the reply was lost on the way (a connection
    # that broke after the server queued it) and rejoins instead of waiting out its timeout.
    heartbeatReply @21 :List(UInt64);
    # A primary to its standby: its shards' state (or none: a heartbeat). Answered with ack, or
    # with Error{replaced} once the standby serves the shards itself. A standby answers a
    # takeBack with it too: the state it holds, handed back to the restarted primary.
    replica @22 :Replica;
    # A restarted primary to its standby: hand my shards back and stop serving them.
    takeBack @23 :Void;
  }
}
