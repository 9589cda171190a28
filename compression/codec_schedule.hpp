// CodecSchedule: which codec one link (the uplink of a tensor class, or a server's downlink) uses
// at each round. Parsed once, here, from the config value of worker.critical_codec,
// worker.noncritical_codec, server.downlink_codec and server.downlink_codecs.<region> (by
// worker/config.cpp, server/config.cpp, the run summary's bytes per phase, and from_phases for
// the Python binding's lists):
//
//   critical_codec: onebit                                   # one codec for the whole run
//   critical_codec: [{until_round: 10, codec: int8}, {codec: onebit}]
//
// Rounds are counted from 1, as in progress lines, round events and worker snapshots (a fresh
// region pushes round 1 first). A phase with `until_round: N` covers every round up to and
// including N; the next phase starts at round N + 1. So the schedule above sends int8 in rounds
// 1..10 and onebit from round 11 on; `codec_at(0)` (before the first round) is the first phase's.
// until_round must be at least 1 and strictly increasing; every phase but the last has one, the
// last has none. A bad schedule is an InputError naming the key and the phase index.
//
// What a switch does to the error-feedback residual is up to the link's owner; the leader and
// the server both keep it (it is in parameter units, valid whatever codec encodes next).
//
// A plain value type: copyable, immutable after construction, thread-safe to read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/yaml_reader.hpp"

namespace geotrain::compression {

struct CodecPhase {
  std::optional<uint64_t> until_round;  // the phase's last round (inclusive); none: to the end
  std::string codec;                    // a spec make_codec accepts
  bool operator==(const CodecPhase&) const = default;
};

class CodecSchedule {
 public:
  // One phase: `spec` for the whole run. Implicit on purpose: a spec string is a one-phase
  // schedule, and configs, tests and bindings that set a spec keep doing so unchanged.
  // InputError (from make_codec) on a bad spec.
  CodecSchedule(std::string spec = "fp32");  // NOLINT(google-explicit-constructor)
  CodecSchedule(const char* spec) : CodecSchedule(std::string(spec)) {}  // NOLINT

  // The config value at `key` (for messages: "worker.critical_codec"): a spec string, or a list
  // of phases {until_round, codec} as above. InputError naming `in.source()`, the key, and for a
  // list the phase index (key[i]) otherwise.
  static CodecSchedule parse(const YamlReader& in, const YAML::Node& node, const std::string& key);
  // Phases as given (checked as parse checks them; `key` names them in errors).
  static CodecSchedule from_phases(std::vector<CodecPhase> phases, const std::string& key);

  // The codec spec of `round` (see above for how rounds are counted).
  const std::string& codec_at(uint64_t round) const { return phases_[phase_at(round)].codec; }
  // The index of the phase `round` is in.
  size_t phase_at(uint64_t round) const;
  const std::vector<CodecPhase>& phases() const { return phases_; }
  bool scheduled() const { return phases_.size() > 1; }
  // Whether a phase that covers `round` or a later round sends fp32 values as they are
  // (is_fp32_spec), or one sends a lossy encoding: a server keeps what it sent a region while a
  // lossy phase may still come, and writes payload headers with the values while an fp32 one may.
  bool fp32_from(uint64_t round) const;
  bool lossy_from(uint64_t round) const;
  // Whether a phase's codec needs to know which spans are matrices (Codec::uses_shape: powersgd),
  // so that a leader cuts its shards into one segment per tensor.
  bool uses_shapes() const;

  // One line for logs and events: the spec itself for one phase, else
  // "int8 until round 10, then onebit".
  std::string text() const;
  // As YAML would write it back: the spec, or [{until_round: 10, codec: int8}, {codec: onebit}].
  YAML::Node to_yaml() const;

  bool operator==(const CodecSchedule&) const = default;

 private:
  // Phases already checked.
  explicit CodecSchedule(std::vector<CodecPhase> phases);
  std::vector<CodecPhase> phases_;
  std::vector<bool> fp32_;  // per phase: is_fp32_spec(codec), known once
};

// Whether a codec spec encodes fp32 values as they are (CodecId::fp32, no compression stage):
// a downlink with it sends values, not changes. InputError on a bad spec.
bool is_fp32_spec(const std::string& spec);

}  // namespace geotrain::compression
