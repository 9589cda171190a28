#include "worker/leader/uplink.hpp"

#include <spdlog/spdlog.h>

#include <tuple>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"

namespace geotrain::worker {

namespace {
compression::ErrorFeedback feedback(const compression::CodecSchedule& schedule, float decay) {
  return compression::ErrorFeedback(compression::make_codec(schedule.phases().front().codec),
                                    compression::FeedbackOptions{decay});
}
}  // namespace

Uplink::Uplink(std::string region, compression::CodecSchedule critical,
               compression::CodecSchedule noncritical, float decay)
    : region_(std::move(region)),
      critical_{critical, feedback(critical, decay), 0, "critical"},
      noncritical_{noncritical, feedback(noncritical, decay), 0, "noncritical"} {}

void Uplink::use_codecs(uint64_t round) {
  for (Class* c : {&critical_, &noncritical_}) {
    const size_t phase = c->schedule.phase_at(round);
    if (phase == c->phase) continue;
    // The residuals stay: they are what the old codec still owed, in parameter units.
    c->ef.set_codec(compression::make_codec(c->schedule.phases()[phase].codec));
    spdlog::info("region {}: round {}: {} codec {} -> {} (phase {} of {})", region_, round,
                 c == &critical_ ? "critical" : "non-critical",
                 c->schedule.phases()[c->phase].codec, c->schedule.phases()[phase].codec, phase + 1,
                 c->schedule.phases().size());
    c->phase = phase;
  }
}

ConstFloatSpan Uplink::delta(ConstFloatSpan local, ConstFloatSpan base) {
  GT_ASSERT(local.size() == base.size(), "delta of {} and {} values", local.size(), base.size());
  if (scratch_.size() < local.size()) scratch_.resize(local.size());
  for (size_t j = 0; j < local.size(); ++j) scratch_[j] = local[j] - base[j];
  return ConstFloatSpan(scratch_).first(local.size());
}

compression::CodecId Uplink::encode(bool critical, uint64_t stream, ConstFloatSpan delta,
                                    Bytes& out, compression::MatrixShape shape) {
  auto& ef = of(critical).ef;
  ef.encode(stream, delta, out, shape);
  return ef.codec().id();
}

compression::CodecId Uplink::encode_fp32(ConstFloatSpan delta, Bytes& out) {
  compression::make_fp32_codec()->encode(delta, out);
  return compression::CodecId::fp32;
}

void Uplink::reset(const std::vector<LeaderShard>& shards) {
  for (const auto& sh : shards)
    for (const auto& seg : sh.segments) of(seg.critical).ef.reset(seg.stream);
}

std::map<std::string, std::vector<float>> Uplink::residuals() const {
  std::map<std::string, std::vector<float>> out;
  for (const Class* c : {&critical_, &noncritical_})
    for (uint64_t stream : c->ef.streams()) {
      const auto r = c->ef.residual(stream);
      out[fmt::format("{}.{}", c->name, stream)].assign(r.begin(), r.end());
    }
  for (const Class* c : {&critical_, &noncritical_})
    for (auto& [stream, state] : c->ef.codec().stream_states())
      out[fmt::format("{}.state.{}", c->name, stream)] = std::move(state);
  return out;
}

void Uplink::restore(const std::map<std::string, std::vector<float>>& residuals,
                     const std::vector<LeaderShard>& shards) {
  // Every stream is one segment of one shard: check them all before changing any.
  std::vector<std::tuple<Class*, uint64_t, const std::vector<float>*>> restores;
  std::vector<std::tuple<Class*, const LeaderShard::Segment*, const std::vector<float>*>> states;
  for (const auto& [name, values] : residuals) {
    bool found = false;
    for (const auto& sh : shards)
      for (const auto& seg : sh.segments) {
        Class& c = of(seg.critical);
        if (fmt::format("{}.state.{}", c.name, seg.stream) == name) {
          states.emplace_back(&c, &seg, &values);
          found = true;
        }
        if (fmt::format("{}.{}", c.name, seg.stream) != name) continue;
        GT_REQUIRE(values.size() == seg.count,
                   "region {}: error-feedback residual '{}' has {} values, its segment {}", region_,
                   name, values.size(), seg.count);
        restores.emplace_back(&c, seg.stream, &values);
        found = true;
      }
    GT_REQUIRE(found,
               "region {}: error-feedback residual '{}' is not a stream of this table's shards",
               region_, name);
  }
  // A codec's state is its own (powersgd's Q): a snapshot of another codec's is dropped (the
  // residuals, in parameter units, go on with any codec). It is checked by the codec: restored
  // into a copy's first, so that a bad one leaves every stream as it was.
  const size_t before = states.size();
  std::erase_if(states, [](const auto& s) { return !std::get<0>(s)->ef.codec().uses_shape(); });
  if (states.size() != before)
    spdlog::info("region {}: {} codec state(s) in the snapshot dropped: the codec now keeps none",
                 region_, before - states.size());
  for (auto& [c, seg, values] : states) {
    auto check = compression::make_codec(c->ef.codec().spec());
    check->restore_stream_state(seg->stream, seg->shape(), *values);
  }
  for (auto& [c, stream, values] : restores) c->ef.set_residual(stream, *values);
  for (auto& [c, seg, values] : states)
    c->ef.codec().restore_stream_state(seg->stream, seg->shape(), *values);
}

}  // namespace geotrain::worker
