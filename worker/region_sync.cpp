#include "worker/region_sync.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <tuple>

#include "compression/factory.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "worker/reply_wait.hpp"

namespace geotrain::worker {

using Clock = std::chrono::steady_clock;

RegionSync::RegionSync(const ParamTable& layout, SyncConfig config, zmq::context_t& context)
    : layout_(layout),
      config_(std::move(config)),
      context_(context),
      critical_ef_(compression::make_codec(config_.critical_codec.phases().front().codec),
                   compression::FeedbackOptions{config_.error_feedback_decay}),
      noncritical_ef_(compression::make_codec(config_.noncritical_codec.phases().front().codec),
                      compression::FeedbackOptions{config_.error_feedback_decay}) {
  GT_REQUIRE(!config_.servers.empty(), "region {}: no servers to synchronise with", config_.region);
  for (const auto& s : config_.servers) {
    ServerLink link;
    link.region = s.region;
    if (config_.streams_per_server > 0) link.client = open_client(s, config_.streams_per_server);
    servers_.push_back(std::move(link));
  }
  if (config_.streams_per_server != 1 || config_.socket_buffer_bytes > 0) {
    const auto b = wire::effective_socket_buffer(config_.socket_buffer_bytes);
    spdlog::info("region {}: {} connection(s) per server; socket buffers {}", config_.region,
                 config_.streams_per_server > 0 ? std::to_string(config_.streams_per_server)
                                                : std::string("auto"),
                 config_.socket_buffer_bytes > 0
                     ? fmt::format("{} KiB asked, the kernel grants {} / {} KiB (send / receive; "
                                   "net.core.wmem_max {}, rmem_max {})",
                                   config_.socket_buffer_bytes / 1024, b.send_bytes / 1024,
                                   b.receive_bytes / 1024, b.send_max, b.receive_max)
                     : std::string("the OS default"));
  }
  base_.assign(layout_.total_elements(), 0.0f);
  GT_REQUIRE(config_.fragments >= 1 && config_.fragments <= 1024,
             "region {}: fragments is {}, must be in [1, 1024]", config_.region, config_.fragments);
  rounds_.assign(config_.fragment_count(), 1);
}

RegionSync::~RegionSync() = default;

std::unique_ptr<wire::Client> RegionSync::open_client(const SyncConfig::Server& s,
                                                      uint32_t streams) {
  wire::ChannelOptions options;
  options.curve_client = s.curve;
  options.lanes = streams;
  options.socket_buffer_bytes = config_.socket_buffer_bytes;
  return std::make_unique<wire::Client>(wire::connect_dealer(context_, s.endpoint, options));
}

uint32_t RegionSync::choose_streams(const SyncConfig::Server& s) {
  // Heartbeats on a throwaway connection: the first waits for the server to come up (and carries
  // the connection's handshakes), the next two time the round trip. A server that does not know
  // this region answers `unregistered`: an answer all the same.
  auto probe = open_client(s, 1);
  double rtt = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto id = probe->send(wire::Heartbeat{});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", s.region);
    ReplyWait w;
    w.stop = stop_;
    const auto t0 = Clock::now();
    try {
      collect(*probe, s.region, {*id}, config_.timeout, "round-trip probe", w);
    } catch (const ServerLost&) {
    }
    if (i > 0) rtt = std::min(rtt, seconds_since(t0));
  }
  const double window = wire::tcp_window_bytes(config_.socket_buffer_bytes);
  const uint32_t n = wire::streams_for_link(rtt, config_.link_mbps, window);
  spdlog::info(
      "region {}: server of region {}: round trip {:.1f} ms, {} connection(s) (auto: {} "
      "Mbit/s x RTT / {:.0f} KiB window)",
      config_.region, s.region, rtt * 1e3, n, config_.link_mbps, window / 1024);
  return n;
}

void RegionSync::set_origin(ConstFloatSpan origin) {
  GT_REQUIRE(origin.size() == base_.size(), "region {}: origin has {} parameters, the table has {}",
             config_.region, origin.size(), base_.size());
  origin_.assign(origin.begin(), origin.end());
}

void RegionSync::build_segments(ShardState& shard) const {
  // Runs of tensors of one class inside [offset, offset + count): one segment each (with
  // tensor_segments, one per tensor).
  const uint64_t begin = shard.offset, end = shard.offset + shard.count;
  for (const auto& t : layout_.tensors()) {
    const uint64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.size);
    if (lo >= hi) continue;
    if (!config_.tensor_segments && !shard.segments.empty() &&
        shard.segments.back().critical == t.critical &&
        shard.offset + shard.segments.back().offset + shard.segments.back().count == lo) {
      shard.segments.back().count += hi - lo;
    } else {
      shard.segments.push_back({lo - begin, hi - lo, t.critical, 0});
    }
  }
  GT_REQUIRE(shard.segments.size() <= 0x10000,
             "region {}: shard {} has {} segments, at most 65536 (worker.chunk_align: tensor "
             "makes one per tensor)",
             config_.region, shard.id, shard.segments.size());
  for (size_t i = 0; i < shard.segments.size(); ++i)
    shard.segments[i].stream = (uint64_t{shard.id} << 16) | i;
}

uint64_t RegionSync::connect(uint64_t resume_at) {
  for (size_t s = 0; s < servers_.size(); ++s)
    if (!servers_[s].client)
      servers_[s].client = open_client(config_.servers[s], choose_streams(config_.servers[s]));
  shards_.clear();
  uint64_t next = UINT64_MAX;
  std::vector<uint64_t> next_of(servers_.size(), 1);  // each server's next round for us
  for (size_t s = 0; s < servers_.size(); ++s) {
    auto& link = servers_[s];
    auto id = link.client->send(
        wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
    ReplyWait w;
    w.stop = stop_;
    auto replies = collect(*link.client, link.region, {*id}, config_.timeout, "hello", w);
    const auto& hello = body_as<wire::HelloReply>(replies.begin()->second, link.region);
    link.last_contact = Clock::now();
    link.flush = std::find(hello.capabilities.begin(), hello.capabilities.end(), "flush") !=
                 hello.capabilities.end();
    next = std::min(next, hello.next_round);
    next_of[s] = hello.next_round;
    for (const auto& info : hello.shards) {
      // Written so that no sum overflows: offset + count could wrap past any bound.
      GT_REQUIRE(info.count <= base_.size() && info.offset <= base_.size() - info.count,
                 "server of region {}: shard {} [{}, {}) lies outside the {} parameters",
                 link.region, info.id, info.offset, info.offset + info.count, base_.size());
      ShardState shard{info.id, info.offset, info.count, s, 0, {}};
      shard.zero_start = info.zero_values;
      shard.fragment = info.fragment;
      build_segments(shard);
      shards_.push_back(std::move(shard));
    }
  }
  uint64_t covered = 0;
  for (const auto& sh : shards_) covered += sh.count;
  GT_REQUIRE(covered == base_.size(), "region {}: the servers' shards cover {} of {} parameters",
             config_.region, covered, base_.size());
  // The servers' map must have this region's fragments: P, plus the critical one.
  const uint32_t frags = config_.fragment_count();
  uint32_t highest = 0;
  for (const auto& sh : shards_) {
    GT_REQUIRE(sh.id < shards_.size(), "region {}: shard id {} out of range ({} shards)",
               config_.region, sh.id, shards_.size());
    highest = std::max(highest, sh.fragment);
  }
  GT_REQUIRE(
      highest + 1 == frags,
      "region {}: the servers' shards are in {} fragment(s), this worker expects {} "
      "(worker.fragments = {}{}; do the servers read the same config?)",
      config_.region, highest + 1, frags, config_.fragments,
      config_.critical_fragment ? ", plus the critical one (worker.stream_critical: false)" : "");
  const uint64_t first = std::max(next == UINT64_MAX ? 1 : next, resume_at);
  rounds_.assign(frags, first);
  // A server that released rounds without us (we started late and were declared dead, or it
  // restarted) expects a later round: map our rounds onto each server's (round_shift).
  for (auto& sh : shards_)
    sh.round_shift = static_cast<int64_t>(first) - static_cast<int64_t>(next_of[sh.server]);
  // A shard whose server still holds the zeros it started from needs no pull: base = origin.
  std::vector<bool> take(shards_.size(), true);
  size_t unpulled = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto& sh = shards_[i];
    if (!sh.zero_start) continue;
    take[i] = false;
    ++unpulled;
    const auto begin = static_cast<std::ptrdiff_t>(sh.offset);
    const auto end = begin + static_cast<std::ptrdiff_t>(sh.count);
    if (origin_.empty())
      std::fill(base_.begin() + begin, base_.begin() + end, 0.0f);
    else
      std::copy(origin_.begin() + begin, origin_.begin() + end, base_.begin() + begin);
  }
  RoundReport startup;
  pull_into_base(true, take, &startup);
  startup_bytes_pulled_ = startup.bytes_pulled;
  spdlog::info(
      "region {}: connected to {} servers, {} shards in {} fragment(s), next round {}; pulled {} "
      "shard(s) in full ({} bytes), {} still zero",
      config_.region, servers_.size(), shards_.size(), frags, first, shards_.size() - unpulled,
      startup.bytes_pulled, unpulled);
  return first;
}

std::vector<ElementRange> RegionSync::fragment_ranges(uint32_t fragment) const {
  std::vector<ElementRange> out;
  for (const auto& sh : shards_)
    if (sh.fragment == fragment) out.push_back({sh.offset, sh.count});
  return out;
}

uint64_t RegionSync::server_round(const ShardState& shard) const {
  return static_cast<uint64_t>(static_cast<int64_t>(rounds_[shard.fragment]) - shard.round_shift);
}

uint64_t RegionSync::min_round(const ShardState& shard) const {
  const uint64_t round = server_round(shard);
  return round > config_.staleness_bound ? round - config_.staleness_bound : 0;
}

RegionSync::Pulls RegionSync::send_pulls(bool full, const std::vector<bool>& take,
                                         const std::vector<bool>& servers) {
  Pulls pulls;
  pulls.ids.resize(servers_.size());
  pulls.shard_of.resize(servers_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (!take[i] || !servers[sh.server]) continue;
    auto& link = servers_[sh.server];
    auto id = link.client->send(
        wire::PullRequest{sh.id, full ? 0 : sh.version, full, full ? 0 : min_round(sh)});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
    pulls.ids[sh.server].push_back(*id);
    pulls.shard_of[sh.server][*id] = i;
  }
  return pulls;
}

void RegionSync::apply_pull(size_t shard_index, const wire::Reply& reply, RoundReport* report,
                            uint64_t& released) {
  auto& sh = shards_[shard_index];
  const auto& region = servers_[sh.server].region;
  const auto& pr = body_as<wire::PullReply>(reply, region);
  wire::check_frames(pr.segments, reply.payloads, reply.header.request_id);
  // Decode everything before changing base: a bad payload leaves base as it was.
  std::vector<std::vector<float>> decoded;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto& seg = pr.segments[k];
    // No sum that could wrap: a segment claiming 2^64 - 1 elements must not be allocated below.
    GT_REQUIRE(seg.count <= sh.count && seg.offset <= sh.count - seg.count,
               "pull reply for shard {}: segment [{}, {}) outside the shard", sh.id, seg.offset,
               seg.offset + seg.count);
    decoded.emplace_back(seg.count);
    compression::decode_payload(wire::frame_bytes(reply.payloads[k]), decoded.back());
    if (report) report->bytes_pulled += reply.payloads[k].size();
  }
  float* base = base_.data() + sh.offset;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto& seg = pr.segments[k];
    const auto& d = decoded[k];
    if (pr.full && origin_.empty()) {
      std::copy(d.begin(), d.end(), base + seg.offset);
    } else if (pr.full) {
      const float* o = origin_.data() + sh.offset + seg.offset;
      for (size_t j = 0; j < d.size(); ++j) base[seg.offset + j] = o[j] + d[j];
    } else {
      for (size_t j = 0; j < d.size(); ++j) base[seg.offset + j] += d[j];
    }
  }
  sh.version = pr.version;
  released =
      std::min(released, static_cast<uint64_t>(static_cast<int64_t>(pr.round) + sh.round_shift));
}

void RegionSync::pull_into_base(bool full, const std::vector<bool>& take, RoundReport* report) {
  const auto t0 = Clock::now();
  Pulls pulls = send_pulls(full, take, std::vector<bool>(servers_.size(), true));
  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (pulls.ids[s].empty()) continue;
    auto replies = collect(*servers_[s].client, servers_[s].region, pulls.ids[s], config_.timeout,
                           "pull", waiting(s, false));
    servers_[s].last_contact = Clock::now();
    for (auto& [id, reply] : replies) apply_pull(pulls.shard_of[s].at(id), reply, report, released);
  }
  if (report) {
    report->pull_seconds = seconds_since(t0);
    report->released_round = released == UINT64_MAX ? 0 : released;
  }
}

RoundReport RegionSync::exchange(ConstFloatSpan local, std::optional<uint32_t> fragment,
                                 bool defer) {
  GT_REQUIRE(local.size() == base_.size(), "region {}: {} local parameters, the table has {}",
             config_.region, local.size(), base_.size());
  GT_ASSERT(!shards_.empty(), "exchange() before connect()");
  GT_ASSERT(!fragment || *fragment < config_.fragment_count(), "fragment {} of {}", *fragment,
            config_.fragment_count());
  defer = defer && config_.shard_wait.count() > 0;
  std::vector<bool> wanted(shards_.size());
  // Shards deferred before this exchange: not pushed in it (the caller did not start them).
  std::vector<bool> skip(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    wanted[i] = !fragment || shards_[i].fragment == *fragment;
    skip[i] = wanted[i] && shards_[i].unstarted;
    GT_ASSERT(defer || !skip[i],
              "region {}: exchange without deferring while shard {} is "
              "deferred (settle() first)",
              config_.region, shards_[i].id);
  }
  RoundReport report;
  report.fragment = fragment.value_or(0);
  report.round = rounds_[report.fragment];
  delta_.resize(base_.size());
  uint64_t released = UINT64_MAX;
  // Servers that lost this region since the last round (keep_alive rejoined them) or that it
  // could not rejoin then: hello and full pulls first (neither waits on any round). A deferred
  // shard pulled in full here is merged with those values.
  const std::vector<bool> wanted_before = wanted;
  for (size_t s = 0; s < servers_.size(); ++s) {
    bool pending = false;
    for (size_t i = 0; i < shards_.size(); ++i)
      pending = pending || (wanted[i] && shards_[i].server == s && shards_[i].resync);
    if (!pending && !servers_[s].lost) continue;
    try {
      if (servers_[s].lost) rejoin(s);
      resync(s, wanted, &report, released);
    } catch (const ServerLost& e) {
      lose(s, e.what());  // redone in push_and_pull, in its turn
    }
  }
  std::vector<bool> take(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) take[i] = wanted[i] && !skip[i];
  push_and_pull(local, take, report, released, defer);
  report.released_round = released == UINT64_MAX ? 0 : released;

  // Round bookkeeping of the deferred shards, before this exchange's round is counted.
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (take[i] && sh.pending()) sh.unstarted = true;  // deferred now
    if (!skip[i] || sh.pending() || sh.resync) continue;
    // Its server lost this region and it was pulled in full here (resync()), not pushed: it
    // pushes from the next exchange on, in the round its server expects then.
    if (wanted[i] == wanted_before[i]) ++sh.round_shift;
    sh.unstarted = false;
  }
  for (size_t i = 0; i < shards_.size(); ++i)
    if (wanted_before[i] && shards_[i].unstarted)
      report.deferred.push_back({shards_[i].offset, shards_[i].count});
  if (fragment) {
    ++rounds_[*fragment];
  } else {
    for (auto& r : rounds_) ++r;
  }
  return report;
}

void RegionSync::push_and_pull(ConstFloatSpan local, const std::vector<bool>& take,
                               RoundReport& report, uint64_t& released, bool defer) {
  std::vector<std::vector<uint64_t>> push_ids(servers_.size());
  std::vector<std::map<uint64_t, size_t>> push_shard(servers_.size());
  std::vector<size_t> shards_on(servers_.size(), 0);
  // Shards of a server still lost, or not pulled in full since it was rejoined, are redone in
  // that server's turn below.
  std::vector<bool> pushed(shards_.size()), redo_on(servers_.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!take[i]) continue;
    const auto& sh = shards_[i];
    if (servers_[sh.server].lost || sh.resync) {
      redo_on[sh.server] = true;
      continue;
    }
    pushed[i] = true;
    const uint64_t id = send_push(i, local, report);
    push_ids[sh.server].push_back(id);
    push_shard[sh.server][id] = i;
    ++shards_on[sh.server];
  }

  // The pulls go right behind the pushes, on the same connection (so the server sees each push
  // before its pull), saving a WAN round trip per round: a pull may name the round being pushed
  // and waits at the server until it is released. A server holds at most 4 waiting requests per
  // peer, so this is done where a server has at most 2 of our shards (push + pull each).
  std::vector<bool> pipelined(servers_.size()), later(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    pipelined[s] = shards_on[s] > 0 && shards_on[s] <= kMaxPipelinedShards;
    later[s] = shards_on[s] > kMaxPipelinedShards;
  }
  Pulls early = send_pulls(false, pushed, pipelined);

  // Deferring: every server gets until shard_wait after the pushes; what has not come by then
  // stays in flight (the shard is deferred).
  const auto defer_at = t0 + config_.shard_wait;
  auto wait_for = [&] {
    if (!defer) return config_.timeout;
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(defer_at - Clock::now()),
                    std::chrono::milliseconds(0));
  };
  auto waiting_deferring = [&](size_t s) {
    ReplyWait w = waiting(s, true);
    w.partial = defer;
    return w;
  };
  // Shard i's pull `id`: merged when among the replies, else its shard is deferred.
  auto pulled_or_deferred = [&](size_t i, uint64_t id,
                                const std::map<uint64_t, wire::Reply>& replies) {
    if (auto it = replies.find(id); it != replies.end()) {
      apply_pull(i, it->second, &report, released);
      return;
    }
    shards_[i].pending_pull = id;
    shards_[i].pending_round = server_round(shards_[i]);
  };

  // Servers in the same order in every region: a leader that redoes its round on one server
  // (below) never waits there for a leader that waits on it at another.
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (redo_on[s]) {
      redo(s, local, take, report, released);
      later[s] = false;
      continue;
    }
    if (push_ids[s].empty()) continue;
    std::vector<uint64_t> ids = push_ids[s];
    ids.insert(ids.end(), early.ids[s].begin(), early.ids[s].end());
    std::map<uint64_t, wire::Reply> replies;
    try {
      replies = collect(*servers_[s].client, servers_[s].region, ids, wait_for(), "push and pull",
                        waiting_deferring(s));
    } catch (const ServerLost& e) {
      lose(s, e.what());
      redo(s, local, take, report, released);
      later[s] = false;
      continue;
    }
    if (!replies.empty()) servers_[s].last_contact = Clock::now();
    for (uint64_t id : push_ids[s]) {
      auto it = replies.find(id);
      auto& sh = shards_[push_shard[s].at(id)];
      if (it == replies.end()) {  // deferred (its pull, if sent, below)
        sh.pending_push = id;
        sh.pending_round = server_round(sh);
        continue;
      }
      const auto& pr = body_as<wire::PushReply>(it->second, servers_[s].region);
      report.max_staleness = std::max(report.max_staleness, pr.staleness);
      report.gate_wait_us = std::max(report.gate_wait_us, pr.gate_wait_us);
    }
    for (uint64_t id : early.ids[s]) pulled_or_deferred(early.shard_of[s].at(id), id, replies);
  }
  report.push_seconds += seconds_since(t0);

  // Servers holding more of our shards: pull once their pushes are in (a deferred push's pull
  // goes out when it is answered: take_deferred()).
  const auto t1 = Clock::now();
  std::vector<bool> answered(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) answered[i] = pushed[i] && !shards_[i].pending();
  Pulls rest = send_pulls(false, answered, later);
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (rest.ids[s].empty()) continue;
    std::map<uint64_t, wire::Reply> replies;
    try {
      replies = collect(*servers_[s].client, servers_[s].region, rest.ids[s], wait_for(), "pull",
                        waiting_deferring(s));
    } catch (const ServerLost& e) {
      lose(s, e.what());
      redo(s, local, take, report, released);
      continue;
    }
    if (!replies.empty()) servers_[s].last_contact = Clock::now();
    for (const auto& [id, i] : rest.shard_of[s]) pulled_or_deferred(i, id, replies);
  }
  report.pull_seconds += seconds_since(t1);
}

void RegionSync::use_codecs(uint64_t round) {
  struct Link {
    const compression::CodecSchedule& schedule;
    compression::ErrorFeedback& ef;
    size_t& phase;
    const char* name;
  };
  for (const Link& l :
       {Link{config_.critical_codec, critical_ef_, critical_phase_, "critical"},
        Link{config_.noncritical_codec, noncritical_ef_, noncritical_phase_, "non-critical"}}) {
    const size_t phase = l.schedule.phase_at(round);
    if (phase == l.phase) continue;
    // The residuals stay: they are what the old codec still owed, in parameter units.
    l.ef.set_codec(compression::make_codec(l.schedule.phases()[phase].codec));
    spdlog::info("region {}: round {}: {} codec {} -> {} (phase {} of {})", config_.region, round,
                 l.name, l.schedule.phases()[l.phase].codec, l.schedule.phases()[phase].codec,
                 phase + 1, l.schedule.phases().size());
    l.phase = phase;
  }
}

uint64_t RegionSync::send_push(size_t i, ConstFloatSpan local, RoundReport& report) {
  const auto& sh = shards_[i];
  use_codecs(rounds_[sh.fragment]);
  for (uint64_t j = sh.offset; j < sh.offset + sh.count; ++j) delta_[j] = local[j] - base_[j];
  wire::Push push{sh.id, server_round(sh), sh.version, {}, config_.tokens_per_round};
  std::vector<zmq::message_t> frames;
  for (const auto& seg : sh.segments) {
    Bytes payload;
    auto& ef = seg.critical ? critical_ef_ : noncritical_ef_;
    ef.encode(seg.stream, ConstFloatSpan(delta_).subspan(sh.offset + seg.offset, seg.count),
              payload);
    const auto codec = static_cast<uint8_t>(compression::parse_header(payload).codec);
    push.segments.push_back({seg.offset, seg.count, codec, payload.size()});
    report.bytes_pushed += payload.size();
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
  }
  auto& link = servers_[sh.server];
  auto id = link.client->send(std::move(push), std::move(frames));
  GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
  return *id;
}

void RegionSync::redo(size_t s, ConstFloatSpan local, const std::vector<bool>& take,
                      RoundReport& report, uint64_t& released) {
  auto& link = servers_[s];
  for (uint32_t attempt = 0; attempt < kMaxRejoinAttempts; ++attempt) {
    try {
      std::vector<bool> mine(shards_.size());
      for (size_t i = 0; i < shards_.size(); ++i) mine[i] = take[i] && shards_[i].server == s;
      if (link.lost) rejoin(s);
      resync(s, mine, &report, released);
      std::vector<uint64_t> pushes;
      for (size_t i = 0; i < shards_.size(); ++i)
        if (mine[i]) pushes.push_back(send_push(i, local, report));
      if (pushes.empty()) return;  // it had released the round already
      auto replies = collect(*link.client, link.region, pushes, config_.timeout, "push (rejoined)",
                             waiting(s, true));
      for (auto& [id, reply] : replies) {
        const auto& pr = body_as<wire::PushReply>(reply, link.region);
        report.max_staleness = std::max(report.max_staleness, pr.staleness);
        report.gate_wait_us = std::max(report.gate_wait_us, pr.gate_wait_us);
      }
      std::vector<bool> only(servers_.size());
      only[s] = true;
      Pulls pulls = send_pulls(false, mine, only);
      auto pulled = collect(*link.client, link.region, pulls.ids[s], config_.timeout,
                            "pull (rejoined)", waiting(s, true));
      for (auto& [id, reply] : pulled)
        apply_pull(pulls.shard_of[s].at(id), reply, &report, released);
      link.last_contact = Clock::now();
      return;
    } catch (const ServerLost& e) {
      lose(s, e.what());
    }
  }
  throw SystemError("wire", "exchange", __FILE__, __LINE__,
                    fmt::format("region {}: the server of region {} lost this region {} times in "
                                "one round; giving up",
                                config_.region, link.region, kMaxRejoinAttempts));
}

void RegionSync::lose(size_t s, const std::string& why) {
  spdlog::warn("region {}: lost the server of region {} ({}); rejoining it", config_.region,
               servers_[s].region, why);
  servers_[s].lost = true;
  drop_deferred(s);
}

}  // namespace geotrain::worker
