#include "compression/codec_schedule.hpp"

#include "compression/factory.hpp"
#include "core/error.hpp"

namespace geotrain::compression {

namespace {

// make_codec's InputError, prefixed with where the spec was written.
void check_spec(const std::string& spec, const std::string& where) {
  try {
    make_codec(spec);
  } catch (const InputError& e) {
    GT_REQUIRE(false, "{}: {}", where, e.what());
  }
}

// The rules of a phase list (see the header); `key` names the list in messages.
void check_phases(const std::vector<CodecPhase>& phases, const std::string& key) {
  GT_REQUIRE(!phases.empty(),
             "{} is an empty list (a codec spec, or phases {{until_round, codec}})", key);
  for (size_t i = 0; i < phases.size(); ++i) {
    const auto& p = phases[i];
    const bool last = i + 1 == phases.size();
    GT_REQUIRE(last || p.until_round.has_value(),
               "{}[{}] has no until_round: every phase but the last needs one", key, i);
    GT_REQUIRE(!last || !p.until_round.has_value(),
               "{}[{}] is the last phase and has until_round {}: the last phase runs to the end, "
               "leave until_round out",
               key, i, p.until_round.value_or(0));
    if (!last) {
      GT_REQUIRE(*p.until_round >= 1, "{}[{}].until_round is 0: rounds are counted from 1", key, i);
      GT_REQUIRE(i == 0 || *p.until_round > *phases[i - 1].until_round,
                 "{}[{}].until_round is {}, not after the previous phase's {} (until_round must "
                 "increase strictly)",
                 key, i, *p.until_round, *phases[i - 1].until_round);
    }
    check_spec(p.codec, fmt::format("{}[{}].codec", key, i));
  }
}

}  // namespace

CodecSchedule::CodecSchedule(std::string spec)
    : CodecSchedule(std::vector<CodecPhase>{{std::nullopt, std::move(spec)}}) {}

CodecSchedule::CodecSchedule(std::vector<CodecPhase> phases) : phases_(std::move(phases)) {
  GT_ASSERT(!phases_.empty(), "a codec schedule without phases");
  for (const auto& p : phases_) fp32_.push_back(is_fp32_spec(p.codec));  // InputError: bad spec
}

CodecSchedule CodecSchedule::from_phases(std::vector<CodecPhase> phases, const std::string& key) {
  check_phases(phases, key);
  return CodecSchedule(std::move(phases));
}

CodecSchedule CodecSchedule::parse(const YamlReader& in, const YAML::Node& node,
                                   const std::string& key) {
  if (node.IsScalar()) {
    auto spec = in.string(node, key);
    check_spec(spec, fmt::format("{}: {}", in.source(), key));
    return CodecSchedule(std::move(spec));
  }
  GT_REQUIRE(node.IsSequence(),
             "{}: {} must be a codec spec or a list of phases [{{until_round: N, codec: SPEC}}, "
             "..., {{codec: SPEC}}], not '{}'",
             in.source(), key, YAML::Dump(node));
  std::vector<CodecPhase> phases;
  for (size_t i = 0; i < node.size(); ++i) {
    const auto where = fmt::format("{}[{}]", key, i);
    const YAML::Node p = node[i];
    in.check_keys(p, where, {"until_round", "codec"});
    GT_REQUIRE(p["codec"], "{}: {} has no codec (each phase is {{until_round: N, codec: SPEC}})",
               in.source(), where);
    CodecPhase phase;
    phase.codec = in.string(p["codec"], where + ".codec");
    if (auto u = p["until_round"])
      phase.until_round = in.number<uint64_t>(u, where + ".until_round", 0, uint64_t{1} << 40);
    phases.push_back(std::move(phase));
  }
  try {
    check_phases(phases, key);
  } catch (const InputError& e) {
    GT_REQUIRE(false, "{}: {}", in.source(), e.what());
  }
  return CodecSchedule(std::move(phases));
}

size_t CodecSchedule::phase_at(uint64_t round) const {
  for (size_t i = 0; i + 1 < phases_.size(); ++i)
    if (round <= *phases_[i].until_round) return i;
  return phases_.size() - 1;
}

bool CodecSchedule::fp32_from(uint64_t round) const {
  for (size_t i = phase_at(round); i < phases_.size(); ++i)
    if (fp32_[i]) return true;
  return false;
}

bool CodecSchedule::lossy_from(uint64_t round) const {
  for (size_t i = phase_at(round); i < phases_.size(); ++i)
    if (!fp32_[i]) return true;
  return false;
}

std::string CodecSchedule::text() const {
  if (phases_.size() == 1) return phases_[0].codec;
  std::string out;
  for (const auto& p : phases_) {
    if (!out.empty()) out += ", then ";
    out += p.codec;
    if (p.until_round) out += fmt::format(" until round {}", *p.until_round);
  }
  return out;
}

YAML::Node CodecSchedule::to_yaml() const {
  if (phases_.size() == 1) return YAML::Node(phases_[0].codec);
  YAML::Node list(YAML::NodeType::Sequence);
  for (const auto& p : phases_) {
    YAML::Node n(YAML::NodeType::Map);
    if (p.until_round) n["until_round"] = *p.until_round;
    n["codec"] = p.codec;
    list.push_back(n);
  }
  return list;
}

bool is_fp32_spec(const std::string& spec) { return make_codec(spec)->id() == CodecId::fp32; }

bool CodecSchedule::uses_shapes() const {
  for (const auto& p : phases_)
    if (make_codec(p.codec)->uses_shape()) return true;
  return false;
}

}  // namespace geotrain::compression
