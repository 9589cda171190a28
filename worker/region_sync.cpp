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
    ServerLink link(s.region);
    if (config_.streams_per_server > 0) link.attach(open_client(s));
    links_.push_back(std::move(link));
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

std::unique_ptr<wire::Client> RegionSync::open_client(const SyncConfig::Server& s) {
  uint32_t streams = config_.streams_per_server;
  if (streams == 0) {
    ReplyWait probe_wait;
    probe_wait.stop = stop_;
    streams = choose_streams(context_, s, config_.region, config_.link_mbps,
                             config_.socket_buffer_bytes, config_.timeout, probe_wait);
  }
  return open_server_client(context_, s, streams, config_.socket_buffer_bytes);
}

void RegionSync::set_origin(ConstFloatSpan origin) {
  GT_REQUIRE(origin.size() == base_.size(), "region {}: origin has {} parameters, the table has {}",
             config_.region, origin.size(), base_.size());
  origin_.assign(origin.begin(), origin.end());
}

void RegionSync::build_segments(LeaderShard& shard) const {
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
  for (size_t s = 0; s < links_.size(); ++s)
    if (!links_[s].open()) links_[s].attach(open_client(config_.servers[s]));
  shards_.clear();
  uint64_t next = UINT64_MAX;
  std::vector<uint64_t> next_of(links_.size(), 1);  // each server's next round for us
  std::optional<FragmentLayout> layout;  // the servers' streaming layout, as their hellos say
  for (size_t s = 0; s < links_.size(); ++s) {
    auto& link = links_[s];
    const uint64_t id =
        link.send(wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}});
    auto replies = link.collect({id}, config_.timeout, "hello", waiting(s, false));
    const auto& hello = body_as<wire::HelloReply>(replies.begin()->second, link.region());
    link.set_offers_flush(std::find(hello.capabilities.begin(), hello.capabilities.end(),
                                    "flush") != hello.capabilities.end());
    next = std::min(next, hello.next_round);
    next_of[s] = hello.next_round;
    if (hello.fragments > 0) {
      const FragmentLayout said{hello.fragments, hello.critical_fragment, link.region()};
      GT_REQUIRE(
          !layout || (layout->fragments == said.fragments && layout->critical == said.critical),
          "region {}: the servers disagree on the streaming layout: the server of region "
          "{} cuts {}, the server of region {} cuts {} (do they read the same config?)",
          config_.region, layout ? layout->server : "", layout ? layout->describe() : "",
          said.server, said.describe());
      layout = said;
    }
    for (const auto& info : hello.shards) {
      // Written so that no sum overflows: offset + count could wrap past any bound.
      GT_REQUIRE(info.count <= base_.size() && info.offset <= base_.size() - info.count,
                 "server of region {}: shard {} [{}, {}) lies outside the {} parameters",
                 link.region(), info.id, info.offset, info.offset + info.count, base_.size());
      LeaderShard shard;
      shard.id = info.id;
      shard.offset = info.offset;
      shard.count = info.count;
      shard.server = s;
      shard.zero_start = info.zero_values;
      shard.flushed_before = shard.flush_held = info.flushed;
      shard.fragment = info.fragment;
      build_segments(shard);
      shards_.push_back(std::move(shard));
    }
  }
  uint64_t covered = 0;
  for (const auto& sh : shards_) covered += sh.count;
  GT_REQUIRE(covered == base_.size(), "region {}: the servers' shards cover {} of {} parameters",
             config_.region, covered, base_.size());
  if (layout) adopt(*layout);
  // The servers' map must have the fragments they said (or, from servers that do not say, this
  // region's own count): P, plus the critical one.
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
  startup_bytes_pulled_ = pull_at_start(take);
  spdlog::info(
      "region {}: connected to {} servers, {} shards in {} fragment(s), next round {}; pulled {} "
      "shard(s) in full ({} bytes), {} still zero",
      config_.region, links_.size(), shards_.size(), frags, first, shards_.size() - unpulled,
      startup_bytes_pulled_, unpulled);
  return first;
}

std::string RegionSync::FragmentLayout::describe() const {
  return fmt::format("{} fragment(s){}", fragments,
                     critical ? " plus the critical tensors' own" : "");
}

void RegionSync::adopt(const FragmentLayout& layout) {
  GT_REQUIRE(layout.fragments <= 1024,
             "server of region {}: its hello says {} fragments, at most 1024", layout.server,
             layout.fragments);
  const FragmentLayout ours{config_.fragments, config_.critical_fragment, ""};
  if (layout.fragments == ours.fragments && layout.critical == ours.critical) return;
  spdlog::warn("region {}: the servers cut {}, this worker's config {}: following the servers",
               config_.region, layout.describe(), ours.describe());
  config_.fragments = layout.fragments;
  config_.critical_fragment = layout.critical;
}

uint64_t RegionSync::pull_at_start(const std::vector<bool>& take) {
  std::vector<std::map<uint64_t, size_t>> sent(links_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    if (take[i]) sent[shards_[i].server][send_full_pull(i)] = i;
  RoundReport pulled;
  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < links_.size(); ++s) {
    if (sent[s].empty()) continue;
    std::vector<uint64_t> ids;
    for (const auto& [id, _] : sent[s]) ids.push_back(id);
    for (auto& [id, reply] : links_[s].collect(ids, config_.timeout, "pull", waiting(s, false))) {
      const size_t i = sent[s].at(id);
      shards_[i].set_version(apply_pull(i, reply, &pulled, released));
    }
  }
  return pulled.bytes_pulled;
}

std::vector<ElementRange> RegionSync::fragment_ranges(uint32_t fragment) const {
  std::vector<ElementRange> out;
  for (const auto& sh : shards_)
    if (sh.fragment == fragment) out.push_back({sh.offset, sh.count});
  return out;
}

uint64_t RegionSync::server_round(const LeaderShard& shard) const {
  return static_cast<uint64_t>(static_cast<int64_t>(rounds_[shard.fragment]) - shard.round_shift);
}

uint64_t RegionSync::pull_floor(uint64_t round) const {
  return round > config_.staleness_bound ? round - config_.staleness_bound : 0;
}

uint64_t RegionSync::send_pull(size_t i, uint64_t round) {
  const auto& sh = shards_[i];
  return links_[sh.server].send(wire::PullRequest{sh.id, sh.version, false, pull_floor(round)});
}

uint64_t RegionSync::send_full_pull(size_t i) {
  const auto& sh = shards_[i];
  return links_[sh.server].send(wire::PullRequest{sh.id, 0, true, 0});
}

uint64_t RegionSync::apply_pull(size_t shard_index, const wire::Reply& reply, RoundReport* report,
                                uint64_t& released) {
  const auto& sh = shards_[shard_index];
  const auto& pr = body_as<wire::PullReply>(reply, links_[sh.server].region());
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
  released =
      std::min(released, static_cast<uint64_t>(static_cast<int64_t>(pr.round) + sh.round_shift));
  return pr.version;
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
    skip[i] = wanted[i] && shards_[i].deferred();
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
  for (size_t s = 0; s < links_.size(); ++s) {
    bool due = links_[s].lost();
    for (size_t i = 0; i < shards_.size(); ++i)
      due = due || (wanted[i] && shards_[i].server == s && shards_[i].needs_full_pull());
    if (!due) continue;
    try {
      if (links_[s].lost()) rejoin(s);
      resync(s, wanted, &report, released);
    } catch (const ServerLost& e) {
      lose(s, e.what());  // redone in push_and_pull, in its turn
    }
  }
  std::vector<bool> take(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) take[i] = wanted[i] && !skip[i];
  push_and_pull(local, take, report, released, defer);
  report.released_round = released == UINT64_MAX ? 0 : released;

  // Deferred shards pulled in full here (their server lost this region) go back to the caller;
  // their server expects them from the next exchange on, in the round it counts then.
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (!skip[i] || sh.phase() != ShardPhase::merged) continue;
    if (wanted[i] == wanted_before[i]) ++sh.round_shift;
    sh.hand_back();
  }
  for (size_t i = 0; i < shards_.size(); ++i)
    if (wanted_before[i] && shards_[i].deferred())
      report.deferred.push_back({shards_[i].offset, shards_[i].count});
  if (fragment) {
    ++rounds_[*fragment];
  } else {
    for (auto& r : rounds_) ++r;
  }
  return report;
}

std::chrono::milliseconds RegionSync::RoundClock::left() const {
  if (!defer) return timeout;
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(defer_at - Clock::now()),
                  std::chrono::milliseconds(0));
}

void RegionSync::push_and_pull(ConstFloatSpan local, const std::vector<bool>& take,
                               RoundReport& report, uint64_t& released, bool defer) {
  // Every push goes out before any reply is awaited. Shards of a server still lost, or not
  // pulled in full since it was rejoined, are redone in that server's turn below.
  std::vector<bool> redo_on(links_.size());
  std::vector<size_t> pushed_on(links_.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!take[i]) continue;
    auto& sh = shards_[i];
    if (links_[sh.server].lost() || sh.needs_full_pull()) {
      redo_on[sh.server] = true;
      continue;
    }
    sh.push(send_push(i, local, report));
    ++pushed_on[sh.server];
  }
  // The pulls go right behind the pushes, on the same connection (so the server sees each push
  // before its pull), saving a WAN round trip per round: a pull may name the round being pushed
  // and waits at the server until it is released. A server holds at most 4 waiting requests per
  // peer, so this is done where a server has at most 2 of our shards (push + pull each).
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (sh.phase() == ShardPhase::pushing && pushed_on[sh.server] <= kMaxPipelinedShards)
      sh.pull(send_pull(i, server_round(sh)));
  }
  // Deferring: every server gets until shard_wait after the pushes; what has not come by then
  // stays in flight (the shard is deferred).
  const RoundClock clock{t0 + config_.shard_wait, defer, config_.timeout};

  // Servers in the same order in every region: a leader that redoes its round on one server
  // (below) never waits there for a leader that waits on it at another.
  for (size_t s = 0; s < links_.size(); ++s) {
    if (redo_on[s]) {
      redo(s, local, take, report, released);
      continue;
    }
    if (pushed_on[s] == 0) continue;
    try {
      await_replies(s, clock, "push and pull", report, released);
    } catch (const ServerLost& e) {
      lose(s, e.what());
      redo(s, local, take, report, released);
    }
  }
  report.push_seconds += seconds_since(t0);

  // Servers holding more of our shards: pull once their pushes are in (a deferred push's pull
  // goes out when it is answered: take_deferred()).
  const auto t1 = Clock::now();
  std::vector<bool> pulling_on(links_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (sh.phase() != ShardPhase::pushed) continue;
    sh.pull(send_pull(i, server_round(sh)));
    pulling_on[sh.server] = true;
  }
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!pulling_on[s]) continue;
    try {
      await_replies(s, clock, "pull", report, released);
    } catch (const ServerLost& e) {
      lose(s, e.what());
      redo(s, local, take, report, released);
    }
  }
  report.pull_seconds += seconds_since(t1);
}

void RegionSync::await_replies(size_t s, const RoundClock& clock, const char* what,
                               RoundReport& report, uint64_t& released) {
  std::vector<uint64_t> ids;
  for (const auto& sh : shards_) {
    if (sh.server != s || !sh.exchanging()) continue;
    if (sh.push_id()) ids.push_back(*sh.push_id());
    if (sh.pull_id()) ids.push_back(*sh.pull_id());
  }
  ReplyWait how = waiting(s, true);
  how.partial = clock.defer;
  take_replies(s, links_[s].collect(ids, clock.left(), what, std::move(how)), report, released);
  // What has not come is deferred; a push answered without its pull waits for the pulls below.
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto& sh = shards_[i];
    if (sh.server == s && sh.exchanging() && sh.phase() != ShardPhase::pushed) defer_shard(i);
  }
}

void RegionSync::take_replies(size_t s, const std::map<uint64_t, wire::Reply>& replies,
                              RoundReport& report, uint64_t& released) {
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (sh.server != s || !sh.exchanging()) continue;
    if (auto id = sh.push_id()) {
      if (auto it = replies.find(*id); it != replies.end()) {
        const auto& pr = body_as<wire::PushReply>(it->second, links_[s].region());
        report.max_staleness = std::max(report.max_staleness, pr.staleness);
        report.gate_wait_us = std::max(report.gate_wait_us, pr.gate_wait_us);
        sh.push_answered();
      }
    }
    if (auto id = sh.pull_id())
      if (auto it = replies.find(*id); it != replies.end())
        sh.pulled(apply_pull(i, it->second, &report, released));
  }
}

void RegionSync::defer_shard(size_t i) {
  auto& sh = shards_[i];
  sh.defer(server_round(sh));
  auto& link = links_[sh.server];
  if (sh.push_id()) link.leave_in_flight(*sh.push_id());
  if (sh.pull_id()) link.leave_in_flight(*sh.pull_id());
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
  return links_[sh.server].send(std::move(push), std::move(frames));
}

void RegionSync::redo(size_t s, ConstFloatSpan local, const std::vector<bool>& take,
                      RoundReport& report, uint64_t& released) {
  auto& link = links_[s];
  for (uint32_t attempt = 0; attempt < kMaxRejoinAttempts; ++attempt) {
    try {
      std::vector<bool> mine(shards_.size());
      for (size_t i = 0; i < shards_.size(); ++i) mine[i] = take[i] && shards_[i].server == s;
      if (link.lost()) rejoin(s);
      resync(s, mine, &report, released);
      std::vector<uint64_t> pushes;
      for (size_t i = 0; i < shards_.size(); ++i) {
        if (!mine[i]) continue;
        shards_[i].push(send_push(i, local, report));
        pushes.push_back(*shards_[i].push_id());
      }
      if (pushes.empty()) return;  // it had released the round already
      auto replies = link.collect(pushes, config_.timeout, "push (rejoined)", waiting(s, true));
      take_replies(s, replies, report, released);
      std::vector<uint64_t> pulls;
      for (size_t i = 0; i < shards_.size(); ++i) {
        if (!mine[i]) continue;
        shards_[i].pull(send_pull(i, server_round(shards_[i])));
        pulls.push_back(*shards_[i].pull_id());
      }
      take_replies(s, link.collect(pulls, config_.timeout, "pull (rejoined)", waiting(s, true)),
                   report, released);
      return;
    } catch (const ServerLost& e) {
      lose(s, e.what());
    }
  }
  throw SystemError("wire", "exchange", __FILE__, __LINE__,
                    fmt::format("region {}: the server of region {} lost this region {} times in "
                                "one round; giving up",
                                config_.region, link.region(), kMaxRejoinAttempts));
}

void RegionSync::lose(size_t s, const std::string& why) {
  spdlog::warn("region {}: lost the server of region {} ({}); rejoining it", config_.region,
               links_[s].region(), why);
  links_[s].lose();
  for (auto& sh : shards_)
    if (sh.server == s) sh.lost();
}

}  // namespace geotrain::worker
