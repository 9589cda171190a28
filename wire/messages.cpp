#include "wire/messages.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <memory>

#include "wire/protocol.capnp.h"

namespace geotrain::wire {

namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
// Clang before 17 has no class template argument deduction for aggregates (the libFuzzer build
// of fuzz/ uses Debian's clang 14): the guide C++17 needed.
template <class... F>
Overload(F...) -> Overload<F...>;

void put_segments(capnp::List<schema::Segment>::Builder out, const std::vector<Segment>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto s = out[static_cast<unsigned>(i)];
    s.setOffset(in[i].offset);
    s.setBytes(in[i].bytes);
  }
}

std::vector<Segment> get_segments(capnp::List<schema::Segment>::Reader in) {
  std::vector<Segment> out;
  out.reserve(in.size());
  for (auto s : in) out.push_back({s.getOffset(), s.getBytes()});
  return out;
}

void put_strings(capnp::List<capnp::Text>::Builder out, const std::vector<std::string>& in) {
  for (size_t i = 0; i < in.size(); ++i) out.set(static_cast<unsigned>(i), in[i]);
}

std::vector<std::string> get_strings(capnp::List<capnp::Text>::Reader in) {
  std::vector<std::string> out;
  for (auto t : in) out.emplace_back(t.cStr(), t.size());
  return out;
}

std::string str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

capnp::Data::Reader data(const Bytes& b) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(b.data()), b.size());
}
Bytes bytes(capnp::Data::Reader d) {
  Bytes out(d.size());
  if (d.size() > 0) std::memcpy(out.data(), d.begin(), d.size());
  return out;
}

void build(schema::Header::Builder h, const Body& body) {
  std::visit(
      Overload{
          [&](const Hello& m) {
            auto b = h.initHello();
            b.setRegion(m.region);
            b.setProtocolVersion(m.protocol_version);
            b.setTableHash(m.table_hash);
            put_strings(b.initCapabilities(static_cast<unsigned>(m.capabilities.size())),
                        m.capabilities);
          },
          [&](const HelloReply& m) {
            auto b = h.initHelloReply();
            b.setServerRegion(m.server_region);
            auto shards = b.initShards(static_cast<unsigned>(m.shards.size()));
            for (size_t i = 0; i < m.shards.size(); ++i) {
              shards[static_cast<unsigned>(i)].setId(m.shards[i].id);
              shards[static_cast<unsigned>(i)].setOffset(m.shards[i].offset);
              shards[static_cast<unsigned>(i)].setCount(m.shards[i].count);
              shards[static_cast<unsigned>(i)].setZeroValues(m.shards[i].zero_values);
              shards[static_cast<unsigned>(i)].setFragment(m.shards[i].fragment);
              shards[static_cast<unsigned>(i)].setFlushed(m.shards[i].flushed);
              shards[static_cast<unsigned>(i)].setNextRound(m.shards[i].next_round);
            }
            b.setNextRound(m.next_round);
            b.setHeartbeatMs(m.heartbeat_ms);
            put_strings(b.initCapabilities(static_cast<unsigned>(m.capabilities.size())),
                        m.capabilities);
            b.setFragments(m.fragments);
            b.setCriticalFragment(m.critical_fragment);
          },
          [&](const Heartbeat&) { h.setHeartbeat(); },
          [&](const Push& m) {
            auto b = h.initPush();
            b.setShard(m.shard);
            b.setRound(m.round);
            b.setBaseVersion(m.base_version);
            put_segments(b.initSegments(static_cast<unsigned>(m.segments.size())), m.segments);
            b.setTokens(m.tokens);
            b.setFlush(m.flush);
            b.setSkip(m.skip);
            b.setAbsent(m.absent);
          },
          [&](const PushReply& m) {
            auto b = h.initPushReply();
            b.setShard(m.shard);
            b.setRound(m.round);
            b.setStaleness(m.staleness);
            b.setGateWaitUs(m.gate_wait_us);
            b.setAwaitedSilenceMs(m.awaited_silence_ms);
          },
          [&](const PullRequest& m) {
            auto b = h.initPull();
            b.setShard(m.shard);
            b.setSinceVersion(m.since_version);
            b.setFull(m.full);
            b.setMinRound(m.min_round);
            b.setAfterFlush(m.after_flush);
          },
          [&](const PullReply& m) {
            auto b = h.initPullReply();
            b.setShard(m.shard);
            b.setVersion(m.version);
            b.setRound(m.round);
            b.setFull(m.full);
            put_segments(b.initSegments(static_cast<unsigned>(m.segments.size())), m.segments);
            b.setFrontier(m.frontier);
          },
          [&](const Error& m) {
            auto b = h.initError();
            b.setCode(static_cast<schema::ErrorCode>(m.code));
            b.setMessage(m.message);
          },
          [&](const StatsRequest&) { h.setStatsRequest(); },
          [&](const StatsReply& m) { h.setStatsReply(m.json); },
          [&](const CheckpointRequest&) { h.setCheckpoint(); },
          [&](const CheckpointReply& m) { h.setCheckpointReply(m.round); },
          [&](const Shutdown&) { h.setShutdown(); },
          [&](const Ack&) { h.setAck(); },
          [&](const Goodbye&) { h.setGoodbye(); },
          [&](const KvSet& m) {
            auto b = h.initKvSet();
            b.setKey(m.key);
            b.setValue(data(m.value));
          },
          [&](const KvGet& m) { h.setKvGet(m.key); },
          [&](const KvTryGet& m) { h.setKvTryGet(m.key); },
          [&](const HeartbeatReply& m) {
            auto ids = h.initHeartbeatReply(static_cast<unsigned>(m.answered.size()));
            for (size_t i = 0; i < m.answered.size(); ++i)
              ids.set(static_cast<unsigned>(i), m.answered[i]);
          },
          [&](const KvReply& m) {
            auto b = h.initKvReply();
            b.setKey(m.key);
            b.setValue(data(m.value));
          },
          [&](const Replica& m) {
            auto b = h.initReplica();
            b.setEpoch(m.epoch);
            auto list = b.initShards(static_cast<unsigned>(m.shards.size()));
            for (size_t i = 0; i < m.shards.size(); ++i) {
              auto s = list[static_cast<unsigned>(i)];
              s.setId(m.shards[i].id);
              s.setVersion(m.shards[i].version);
              s.setReleasedRound(m.shards[i].released_round);
              s.setMomentum(m.shards[i].momentum);
              s.setChange(m.shards[i].change);
              s.setBaseVersion(m.shards[i].base_version);
            }
          },
          [&](const TakeBack&) { h.setTakeBack(); },
      },
      body);
}

Body read(schema::Header::Reader h, uint64_t request_id) {
  switch (h.which()) {
    case schema::Header::HELLO: {
      auto r = h.getHello();
      return Hello{str(r.getRegion()), r.getProtocolVersion(), r.getTableHash(),
                   get_strings(r.getCapabilities())};
    }
    case schema::Header::HELLO_REPLY: {
      auto r = h.getHelloReply();
      HelloReply m{str(r.getServerRegion()),
                   {},
                   r.getNextRound(),
                   r.getHeartbeatMs(),
                   get_strings(r.getCapabilities()),
                   r.getFragments(),
                   r.getCriticalFragment()};
      for (auto s : r.getShards())
        m.shards.push_back({s.getId(), s.getOffset(), s.getCount(), s.getZeroValues(),
                            s.getFragment(), s.getFlushed(), s.getNextRound()});
      return m;
    }
    case schema::Header::HEARTBEAT:
      return Heartbeat{};
    case schema::Header::PUSH: {
      auto r = h.getPush();
      return Push{r.getShard(),  r.getRound(), r.getBaseVersion(), get_segments(r.getSegments()),
                  r.getTokens(), r.getFlush(), r.getSkip(),        r.getAbsent()};
    }
    case schema::Header::PUSH_REPLY: {
      auto r = h.getPushReply();
      return PushReply{r.getShard(), r.getRound(), r.getStaleness(), r.getGateWaitUs(),
                       r.getAwaitedSilenceMs()};
    }
    case schema::Header::PULL: {
      auto r = h.getPull();
      return PullRequest{r.getShard(), r.getSinceVersion(), r.getFull(), r.getMinRound(),
                         r.getAfterFlush()};
    }
    case schema::Header::PULL_REPLY: {
      auto r = h.getPullReply();
      return PullReply{
          r.getShard(),   r.getVersion(), r.getRound(), r.getFull(), get_segments(r.getSegments()),
          r.getFrontier()};
    }
    case schema::Header::ERROR: {
      auto r = h.getError();
      auto code = static_cast<uint16_t>(r.getCode());
      if (code > static_cast<uint16_t>(ErrorCode::replaced))
        throw WireError(ErrorCode::malformed, fmt::format("error code {} is unknown", code),
                        request_id);
      return Error{static_cast<ErrorCode>(code), str(r.getMessage())};
    }
    case schema::Header::STATS_REQUEST:
      return StatsRequest{};
    case schema::Header::STATS_REPLY:
      return StatsReply{str(h.getStatsReply())};
    case schema::Header::CHECKPOINT:
      return CheckpointRequest{};
    case schema::Header::CHECKPOINT_REPLY:
      return CheckpointReply{h.getCheckpointReply()};
    case schema::Header::SHUTDOWN:
      return Shutdown{};
    case schema::Header::ACK:
      return Ack{};
    case schema::Header::KV_SET: {
      auto r = h.getKvSet();
      return KvSet{str(r.getKey()), bytes(r.getValue())};
    }
    case schema::Header::KV_GET:
      return KvGet{str(h.getKvGet())};
    case schema::Header::KV_REPLY: {
      auto r = h.getKvReply();
      return KvReply{str(r.getKey()), bytes(r.getValue())};
    }
    case schema::Header::GOODBYE:
      return Goodbye{};
    case schema::Header::KV_TRY_GET:
      return KvTryGet{str(h.getKvTryGet())};
    case schema::Header::HEARTBEAT_REPLY: {
      auto ids = h.getHeartbeatReply();
      if (ids.size() > kMaxAnsweredIds)
        throw WireError(ErrorCode::malformed,
                        fmt::format("heartbeatReply lists {} request ids, limit {}", ids.size(),
                                    kMaxAnsweredIds),
                        request_id);
      HeartbeatReply m;
      for (const uint64_t id : ids) m.answered.push_back(id);
      return m;
    }
    case schema::Header::REPLICA: {
      auto r = h.getReplica();
      if (r.getShards().size() > kMaxReplicaShards)
        throw WireError(ErrorCode::malformed,
                        fmt::format("replica lists {} shards, limit {}", r.getShards().size(),
                                    kMaxReplicaShards),
                        request_id);
      Replica m;
      m.epoch = r.getEpoch();
      for (auto s : r.getShards())
        m.shards.push_back({s.getId(), s.getVersion(), s.getReleasedRound(), s.getMomentum(),
                            s.getChange(), s.getBaseVersion()});
      return m;
    }
    case schema::Header::TAKE_BACK:
      return TakeBack{};
  }
  throw WireError(
      ErrorCode::malformed,
      fmt::format("header: message type {} is unknown", static_cast<unsigned>(h.which())),
      request_id);
}

}  // namespace

const char* error_code_name(ErrorCode code) {
  static constexpr const char* kNames[] = {
      "malformed", "badVersion",    "unregistered", "badTableHash", "badShard",
      "badRange",  "badCodec",      "badRound",     "badPayload",   "tooLarge",
      "busy",      "unknownRegion", "internal",     "notServing",   "replaced"};
  auto i = static_cast<size_t>(code);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const char* body_name(const Body& body) {
  static constexpr const char* kNames[] = {
      "hello",      "helloReply",      "heartbeat", "push",         "pushReply",
      "pull",       "pullReply",       "error",     "statsRequest", "statsReply",
      "checkpoint", "checkpointReply", "shutdown",  "ack",          "kvSet",
      "kvGet",      "kvReply",         "goodbye",   "kvTryGet",     "heartbeatReply",
      "replica",    "takeBack"};
  static_assert(std::size(kNames) == std::variant_size_v<Body>);
  return kNames[body.index()];
}

Frame encode_header(const Header& header) {
  capnp::MallocMessageBuilder builder;
  auto h = builder.initRoot<schema::Header>();
  h.setVersion(header.version);
  h.setRequestId(header.request_id);
  build(h, header.body);
  auto words = capnp::messageToFlatArray(builder);
  auto b = words.asBytes();
  return Frame(b.begin(), b.size());
}

Header decode_header(const Frame& frame) {
  const size_t n = frame.size();
  if (n == 0 || n % sizeof(capnp::word) != 0)
    throw WireError(
        ErrorCode::malformed,
        fmt::format("header: frame 0 has {} bytes, must be a non-zero multiple of 8", n));
  if (n / sizeof(capnp::word) > kMaxHeaderWords)
    throw WireError(ErrorCode::too_large, fmt::format("header: frame 0 has {} bytes, limit is {}",
                                                      n, kMaxHeaderWords * sizeof(capnp::word)));
  // Copy into word-aligned memory: zmq frame data carries no alignment guarantee.
  auto words = kj::heapArray<capnp::word>(n / sizeof(capnp::word));
  std::memcpy(words.begin(), frame.data(), n);
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kMaxHeaderWords;
  options.nestingLimit = 16;
  uint64_t request_id = 0;
  try {
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    auto h = reader.getRoot<schema::Header>();
    request_id = h.getRequestId();
    if (h.getVersion() != kProtocolVersion)
      throw WireError(
          ErrorCode::bad_version,
          fmt::format("header: protocol version {} is not supported, this build speaks {} (run "
                      "one geotrain release on every server and worker)",
                      h.getVersion(), kProtocolVersion),
          request_id);
    return Header{request_id, read(h, request_id), h.getVersion()};
  } catch (const kj::Exception& e) {
    throw WireError(
        ErrorCode::malformed,
        fmt::format("header: not a valid Cap'n Proto message ({})", e.getDescription().cStr()),
        request_id);
  }
}

Frame frame_from_bytes(Bytes&& bytes) {
  auto owner = std::make_unique<Bytes>(std::move(bytes));
  const ConstByteSpan view(*owner);
  return frame_owning(view, std::move(owner));
}

void check_frames(const std::vector<Segment>& segments, std::span<const Frame> frames,
                  uint64_t request_id) {
  if (segments.size() != frames.size())
    throw WireError(ErrorCode::malformed,
                    fmt::format("header lists {} segments but {} payload frames follow",
                                segments.size(), frames.size()),
                    request_id);
  for (size_t i = 0; i < segments.size(); ++i)
    if (segments[i].bytes != frames[i].size())
      throw WireError(ErrorCode::malformed,
                      fmt::format("segment {}: header says {} bytes, frame has {}", i,
                                  segments[i].bytes, frames[i].size()),
                      request_id);
}

}  // namespace geotrain::wire
