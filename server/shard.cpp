#include "server/shard.hpp"

#include <algorithm>
#include <thread>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "server/shard_kernels.hpp"

namespace geotrain::server {

float staleness_weight(StalenessWeighting weighting, uint32_t tau) {
  return weighting == StalenessWeighting::inverse ? 1.0f / (1.0f + static_cast<float>(tau)) : 1.0f;
}

Shard::Shard(ShardRange range, std::vector<uint8_t> critical_mask, size_t regions,
             const ShardSettings& settings, std::vector<compression::SpanPiece> pieces)
    : range_(range),
      mask_(std::move(critical_mask)),
      settings_(settings),
      pool_(range.count),
      values_(pool_.acquire()),
      momentum_(range.count, 0.0f),
      gate_(regions, settings.staleness_bound),
      pulled_(regions, false),
      base_(regions),
      sent_version_(regions, 0),
      pieces_(std::move(pieces)) {
  for (size_t r = 0; r < regions; ++r) {
    for (const auto& phase : settings.downlink_schedule(r).phases()) {
      if (downlinks_.count(phase.codec)) continue;
      downlinks_.emplace(phase.codec,
                         compression::ErrorFeedback(
                             compression::make_codec(phase.codec),
                             compression::FeedbackOptions{settings.downlink_feedback_decay}));
    }
    downlink_of_.push_back(&downlinks_.at(settings.downlink_schedule(r).phases().front().codec));
  }
  GT_ASSERT(mask_.size() == range.count, "mask size {} != shard size {}", mask_.size(),
            range.count);
  critical_count_ = static_cast<uint64_t>(std::count(mask_.begin(), mask_.end(), uint8_t{1}));
  // Versions get their payload header as they are written when some region is sent values on
  // every pull; otherwise only a full pull needs one, and makes it then.
  header_on_fill_ = false;
  for (size_t r = 0; r < regions; ++r)
    header_on_fill_ = header_on_fill_ || settings.downlink_schedule(r).fp32_from(0);
  values_->fill([](size_t, FloatSpan block) { std::fill(block.begin(), block.end(), 0.0f); },
                nullptr, header_on_fill_);
}

void Shard::commit(std::shared_ptr<ValueBuffer> next) {
  values_ = std::move(next);
  ++version_;
}

Shard::StagedPush Shard::start_push(size_t region, uint64_t round, ConstFloatSpan delta,
                                    const std::vector<bool>& live, PushMeta meta) {
  return stage(region, round, delta, live, meta,
               splitter_ != nullptr && values_->size() >= kSplitElements);
}

bool Shard::admits(uint64_t round, const std::vector<bool>& live) const {
  return gate_.admits(round, live, settings_.consistency.is_quorum() ? released_round_ : 0);
}

Shard::StagedPush Shard::stage(size_t region, uint64_t round, ConstFloatSpan delta,
                               const std::vector<bool>& live, PushMeta meta, bool on_splitter) {
  const size_t n = values_->size();
  GT_ASSERT(!staged_, "start_push while another push is staged");
  GT_ASSERT(delta.size() == n, "delta size {} != shard size {}", delta.size(), n);
  GT_ASSERT(round == gate_.clock(region) + 1, "round {} after clock {}", round,
            gate_.clock(region));
  GT_ASSERT(live.at(region), "push from a dead region {}", region);
  // emplace(Staged{}), not emplace(): clang (the libFuzzer build of fuzz/) decides inside the
  // class definition, before Staged's member initializers, that Staged is not
  // default-constructible.
  auto& st = staged_.emplace(Staged{});
  st.region = region;
  st.round = round;
  st.meta = meta;
  st.live = live;
  st.result.staleness = gate_.staleness(region, round, live);
  st.result.weight = staleness_weight(settings_.weighting, st.result.staleness);
  st.result.late = round <= released_round_;
  st.merge_round = st.result.late ? released_round_ + 1 : round;
  st.live_count = static_cast<float>(std::count(live.begin(), live.end(), true));
  st.delta = delta;
  if (critical_count_ < n) {
    st.next = pool_.acquire();
    st.out = st.next->unsealed_values();
  }
  if (splits_momentum()) {
    // TODO(perf): a round's accumulator is allocated (zeroed) at its first push and freed at its
    // release; a spare kept across rounds would save that.
    accumulator_next_.resize(n);
    if (auto it = pending_.find(st.merge_round); it != pending_.end())
      st.accumulator = it->second.accumulator;
  }
  if (on_splitter) {
    if (st.next) {
      const size_t blocks = (n + ValueBuffer::kFillBlock - 1) / ValueBuffer::kFillBlock;
      st.claims = std::make_unique<std::atomic<uint8_t>[]>(blocks);  // all kFree
    }
    st.on_splitter = std::make_unique<SplitTask>(splitter_, [this] { compute_staged(nullptr); });
  }
  return StagedPush(*this);
}

Shard::PushResult Shard::apply_push(size_t region, uint64_t round, ConstFloatSpan delta,
                                    const std::vector<bool>& live, PushMeta meta) {
  // start_push + commit, with both threads on the step instead of one.
  auto staged = stage(region, round, delta, live, meta, false);
  compute_staged(splitter_);
  return staged.commit();
}

namespace {
// Block claims of a staged push being computed by two threads (Shard::Staged::claims).
constexpr uint8_t kFree = 0, kFiller = 1, kHelper = 2, kHelped = 3;
}  // namespace

void Shard::step_staged(size_t begin, FloatSpan out) {
  const auto& st = *staged_;
  const size_t count = out.size();
  // Non-critical elements only: w(tau) * delta / live, folded into the optimizer's step. Without
  // critical elements the mask selects everything and the step runs unmasked.
  const auto mask = critical_count_ > 0 ? std::span<const uint8_t>(mask_).subspan(begin, count)
                                        : std::span<const uint8_t>();
  const auto theta = values_->values().subspan(begin, count);
  const auto delta = st.delta.subspan(begin, count);
  const DeltaScale scale{st.result.weight, st.live_count};
  if (!has_momentum()) {
    outer_step(settings_.optimizer, theta, {}, delta, mask, 0, scale, out, {});
    return;
  }
  // With momentum, the push's share only; the round's release adds the momentum's.
  const auto a = st.accumulator.empty() ? st.accumulator : st.accumulator.subspan(begin, count);
  push_step(settings_.optimizer, theta, a, delta, mask, 0, scale, out,
            FloatSpan(accumulator_next_).subspan(begin, count));
}

void Shard::compute_staged(PassSplitter* splitter) {
  auto& st = *staged_;
  const size_t n = values_->size();
  // The critical part waits for its round's release: keep a copy. Without critical elements the
  // region's push only counts as taking part in the round.
  if (critical_count_ > 0 || n == 0) st.kept.assign(st.delta.begin(), st.delta.end());
  // The rest is applied now, by a step that writes the next version beside the current one.
  if (st.next) {
    st.next->fill(
        [&](size_t begin, FloatSpan block) {
          if (st.claims) {
            auto& claim = st.claims[begin / ValueBuffer::kFillBlock];
            uint8_t expected = kFree;
            if (!claim.compare_exchange_strong(expected, kFiller, std::memory_order_acq_rel)) {
              // The other thread has it: wait until it is written, then let fill hash it. A
              // block is a few microseconds of work.
              while (claim.load(std::memory_order_acquire) != kHelped) std::this_thread::yield();
              return;
            }
          }
          step_staged(begin, block);
        },
        splitter, header_on_fill_);
  }
  st.computed = true;
}

void Shard::help_staged() {
  auto& st = *staged_;
  if (!st.claims) return;
  const size_t n = values_->size();
  for (size_t b = (n + ValueBuffer::kFillBlock - 1) / ValueBuffer::kFillBlock; b-- > 0;) {
    uint8_t expected = kFree;
    if (!st.claims[b].compare_exchange_strong(expected, kHelper, std::memory_order_acq_rel))
      return;  // the filler got here: it does the rest
    const size_t begin = b * ValueBuffer::kFillBlock;
    step_staged(begin, st.out.subspan(begin, std::min(ValueBuffer::kFillBlock, n - begin)));
    st.claims[b].store(kHelped, std::memory_order_release);
  }
}

void Shard::commit_staged() {
  auto& st = *staged_;
  help_staged();
  st.on_splitter.reset();  // waits for it
  if (!st.computed) compute_staged(splitter_);
  // A late push (its round released without it) joins the oldest unreleased round's merge; it
  // does not count as that round's push of its region.
  auto& pending = pending_round(st.merge_round);
  if (!st.result.late) {
    pending.pushed[st.region] = true;
    if (!pending.first_push) pending.first_push = st.meta.at;
  }
  pending.deltas.push_back({st.region, st.round, st.meta.tokens, std::move(st.kept), {}});
  if (splits_momentum()) std::swap(pending.accumulator, accumulator_next_);
  if (st.next) commit(std::move(st.next));
  gate_.set_clock(st.region, st.round);
  staged_.reset();
}

Shard::StagedPush::~StagedPush() {
  if (shard_ == nullptr) return;
  shard_->staged_->on_splitter.reset();  // waits for it before the push's buffers go
  shard_->staged_.reset();
}

Shard::PushResult Shard::StagedPush::result() const {
  GT_ASSERT(shard_ != nullptr, "StagedPush::result after commit");
  return shard_->staged_->result;
}

Shard::PushResult Shard::StagedPush::commit() {
  GT_ASSERT(shard_ != nullptr, "StagedPush committed twice");
  const PushResult result = shard_->staged_->result;
  shard_->commit_staged();
  shard_ = nullptr;
  return result;
}

Shard::PendingRound& Shard::pending_round(uint64_t round) {
  auto& p = pending_[round];
  if (p.pushed.empty()) p.pushed.assign(gate_.clocks().size(), false);
  return p;
}

float Shard::merge(std::vector<Contribution>& deltas) {
  // Sum in (region, round) order, then divide: independent of arrival order. With equal weights
  // (or tokens all equal, or some unknown) this is the plain sum divided by the count, the same
  // bytes as before weights existed.
  std::sort(deltas.begin(), deltas.end(), [](const Contribution& x, const Contribution& y) {
    return x.region != y.region ? x.region < y.region : x.round < y.round;
  });
  const bool all_known =
      std::all_of(deltas.begin(), deltas.end(), [](const Contribution& c) { return c.tokens > 0; });
  const bool all_equal = std::all_of(deltas.begin(), deltas.end(), [&](const Contribution& c) {
    return c.tokens == deltas.front().tokens;
  });
  const bool by_tokens =
      settings_.consistency.weighting == MergeWeighting::tokens && all_known && !all_equal;
  const size_t n = values_->size();
  scratch_.assign(n, 0.0f);
  if (by_tokens) {
    uint64_t total = 0;
    for (const auto& c : deltas) {
      const auto w = static_cast<float>(c.tokens);
      for (size_t i = 0; i < n; ++i) scratch_[i] += w * c.delta[i];
      total += c.tokens;
    }
    return static_cast<float>(total);
  }
  for (const auto& c : deltas)
    for (size_t i = 0; i < n; ++i) scratch_[i] += c.delta[i];
  return static_cast<float>(deltas.size());
}

void Shard::release(PendingRound& round) {
  const bool critical = critical_count_ > 0;
  const bool split = splits_momentum();
  if (!critical && !split) return;
  // The division happens in the optimizer's pass: 1 * sum / divisor.
  const float divisor = critical ? merge(round.deltas) : 1.0f;
  GT_ASSERT(!split || !round.accumulator.empty(), "round {} released without its accumulator",
            released_round_ + 1);
  const size_t n = values_->size();
  if (has_momentum()) momentum_next_.resize(n);
  const auto& optimizer = settings_.optimizer;
  auto next = pool_.acquire();
  next->fill(
      [&](size_t begin, FloatSpan block) {
        // In blocks of kFillBlock (a split fill writes its second half in one call), so that the
        // momentum share's second look at each value finds it in the cache.
        for (size_t at = 0; at < block.size(); at += ValueBuffer::kFillBlock) {
          const size_t from = begin + at;
          const auto out = block.subspan(at, std::min(ValueBuffer::kFillBlock, block.size() - at));
          const size_t count = out.size();
          const auto theta = values_->values().subspan(from, count);
          const auto m = ConstFloatSpan(momentum_).subspan(from, count);
          const auto m_out =
              has_momentum() ? FloatSpan(momentum_next_).subspan(from, count) : FloatSpan();
          const auto mask = critical ? std::span<const uint8_t>(mask_).subspan(from, count)
                                     : std::span<const uint8_t>();
          if (critical) {
            outer_step(optimizer, theta, m, ConstFloatSpan(scratch_).subspan(from, count), mask, 1,
                       {1.0f, divisor}, out, m_out);
          } else {
            std::copy(theta.begin(), theta.end(), out.begin());
            std::copy(m.begin(), m.end(), m_out.begin());
          }
          if (split)
            release_step(optimizer, ConstFloatSpan(round.accumulator).subspan(from, count), mask, 0,
                         out, m_out);
        }
      },
      splitter_, header_on_fill_);
  commit(std::move(next));
  if (has_momentum()) std::swap(momentum_, momentum_next_);
}

std::vector<Shard::Released> Shard::release_ready(const std::vector<bool>& live, TimePoint now) {
  const auto& policy = settings_.consistency;
  std::vector<Released> out;
  for (;;) {
    const uint64_t t = released_round_ + 1;
    // Every live region took part (pushed it in time, or sat it out: its clock is past it).
    bool complete = true, any_live = false;
    for (size_t r = 0; r < live.size(); ++r) {
      if (!live[r]) continue;
      any_live = true;
      if (gate_.clock(r) < t) complete = false;
    }
    auto it = pending_.find(t);
    if (it == pending_.end()) {
      // Nobody pushed it: every live region sat it out. Released with no step.
      if (!any_live || !complete) break;
      ++released_round_;
      out.push_back({released_round_, 0, 0});
      continue;
    }
    auto& round = it->second;
    const auto pushed =
        static_cast<size_t>(std::count(round.pushed.begin(), round.pushed.end(), true));
    const bool quorum_due = policy.is_quorum() && pushed >= policy.quorum && round.first_push &&
                            now >= *round.first_push + policy.grace;
    if ((pushed == 0 && !any_live) || !(complete || quorum_due)) break;
    // Sat out by every region that pushed nothing late into it either: no step, no new version.
    if (!round.deltas.empty()) release(round);
    ++released_round_;
    Released rel{released_round_, round.deltas.size(), 0};
    for (const auto& c : round.deltas)
      if (c.round != released_round_) ++rel.late;
    out.push_back(rel);
    pending_.erase(it);
  }
  return out;
}

std::vector<size_t> Shard::holding_back(uint64_t round, const std::vector<bool>& live,
                                        size_t pusher) const {
  std::vector<size_t> out;
  if (settings_.consistency.is_quorum() || round <= settings_.staleness_bound) return out;
  const uint64_t awaited = round - settings_.staleness_bound;
  if (awaited <= released_round_) return out;
  for (size_t r = 0; r < live.size(); ++r)
    if (live[r] && r != pusher && gate_.clock(r) < awaited) out.push_back(r);
  return out;
}

std::optional<Shard::TimePoint> Shard::grace_deadline() const {
  const auto& policy = settings_.consistency;
  if (!policy.is_quorum()) return std::nullopt;
  auto it = pending_.find(released_round_ + 1);
  if (it == pending_.end() || !it->second.first_push) return std::nullopt;
  const auto& pushed = it->second.pushed;
  if (static_cast<size_t>(std::count(pushed.begin(), pushed.end(), true)) < policy.quorum)
    return std::nullopt;
  return *it->second.first_push + policy.grace;
}

uint64_t Shard::sit_out(size_t region, uint64_t last) {
  GT_ASSERT(!staged_, "sit_out while a push is staged");
  const uint64_t clock = gate_.clock(region);
  GT_ASSERT(last >= clock, "region {} sits out up to round {}, behind its clock {}", region, last,
            clock);
  gate_.set_clock(region, last);
  const uint64_t from = std::max(clock, released_round_);
  return last > from ? last - from : 0;
}

void Shard::rejoin(size_t region) {
  for (auto& [round, p] : pending_) {
    p.pushed.at(region) = false;
    std::erase_if(p.deltas, [&](const Contribution& c) { return c.region == region; });
  }
  gate_.set_clock(region, released_round_);
  pulled_.at(region) = false;
  base_.at(region).reset();
  sent_version_.at(region) = 0;
  downlink_of_.at(region)->reset(region);
}

const std::string& Shard::downlink_spec_now(size_t region) const {
  return settings_.downlink_schedule(region).codec_at(gate_.clock(region));
}

bool Shard::keeps_sent_values(size_t region) const {
  return settings_.downlink_schedule(region).lossy_from(gate_.clock(region));
}

bool Shard::pull_sends_values(size_t region, bool full) const {
  return full || scheduled_downlink(region).codec().id() == compression::CodecId::fp32;
}

std::shared_ptr<const ValueBuffer> Shard::pull_values(size_t region) {
  values_->payload_for_send();  // the header, unless the version was written with it
  if (keeps_sent_values(region)) {
    // A lossy downlink sends changes from here on (now, or after an fp32 phase of its schedule):
    // keep what this pull sends to diff against.
    auto& base = base_.at(region);
    if (!base) base.emplace(values_->size());
    std::copy(values().begin(), values().end(), base->begin());
  }
  downlink_of_.at(region)->reset(region);
  pulled_.at(region) = true;
  sent_version_.at(region) = version_;
  return values_;
}

bool Shard::start_downlink_from_zero(size_t region) {
  if (version_ != 0) return false;
  if (keeps_sent_values(region)) {
    auto& base = base_.at(region);
    if (!base) base.emplace(values_->size());
    std::fill(base->begin(), base->end(), 0.0f);
  }
  downlink_of_.at(region)->reset(region);
  pulled_.at(region) = true;
  sent_version_.at(region) = 0;
  return true;
}

size_t Shard::change_bytes(size_t region) const {
  // A size to start the buffer at, which the encode grows if it must: a lossy change is smaller
  // than the values (powersgd's bound, for a matrix of any shape, is not).
  const size_t n = values_->size();
  return std::min(scheduled_downlink(region).codec().max_payload_bytes(n),
                  compression::kHeaderBytes + 4 * n);
}

void Shard::pull_change(size_t region, Bytes& out) {
  GT_ASSERT(!pull_sends_values(region, false), "pull_change for region {}, which is sent values",
            region);
  auto& base = base_.at(region);
  GT_ASSERT(pulled_.at(region) && base.has_value(), "pull_change before pull_values for region {}",
            region);
  // TODO(perf): a codec entry point taking values and sent instead of g would fuse this pass
  // into the error-feedback encode (x = (values - sent) + e), one pass fewer for lossy codecs.
  // A schedule switched codecs: the residual goes on with the new one.
  auto& downlink = downlinks_.at(downlink_spec_now(region));
  downlink_of_.at(region)->move_residual(region, downlink);
  downlink_of_.at(region) = &downlink;
  scratch_.resize(values_->size());
  take_change(values(), *base, scratch_);
  if (pieces_.empty())
    downlink.encode(region, scratch_, out);
  else
    downlink.encode(region, scratch_, out, pieces_);
  sent_version_.at(region) = version_;
}

Bytes Shard::pull_copy(size_t region, bool full) {
  if (pull_sends_values(region, full)) {
    const auto payload = pull_values(region)->payload();
    return Bytes(payload.begin(), payload.end());
  }
  Bytes out;
  pull_change(region, out);
  return out;
}

void Shard::restore(uint64_t version, uint64_t released_round, ConstFloatSpan values,
                    ConstFloatSpan momentum) {
  GT_ASSERT(values.size() == values_->size() && momentum.size() == momentum_.size(),
            "restore sizes {} {} for shard of {}", values.size(), momentum.size(), values_->size());
  auto next = pool_.acquire();
  next->fill(
      [&](size_t begin, FloatSpan block) {
        std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(begin), block.size(),
                    block.begin());
      },
      splitter_, header_on_fill_);
  values_ = std::move(next);
  std::copy(momentum.begin(), momentum.end(), momentum_.begin());
  version_ = version;
  released_round_ = released_round;
  pending_.clear();
  for (size_t r = 0; r < base_.size(); ++r) rejoin(r);
}

}  // namespace geotrain::server
