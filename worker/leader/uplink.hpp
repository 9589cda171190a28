// Uplink: how a region leader encodes what its shards push (DESIGN.md, "One round", step 3): one
// ErrorFeedback per tensor class (critical / non-critical, each with its codec schedule), one
// residual stream per shard segment (LeaderShard::Segment::stream), and the scratch the deltas
// are taken in. The residuals are what a worker snapshot keeps and --resume restores.
//
// Not thread-safe: RegionSync's thread. Buffers: delta() returns a span of the scratch, valid
// until the next delta().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "compression/error_feedback.hpp"
#include "core/span.hpp"
#include "worker/leader/shard.hpp"

namespace geotrain::worker {

class Uplink {
 public:
  Uplink(std::string region, compression::CodecSchedule critical,
         compression::CodecSchedule noncritical, float decay);

  // Sets both classes' codecs to their schedules' codecs of `round` (this region's count); at a
  // switch the residuals are kept (they are in parameter units) and the switch is logged.
  void use_codecs(uint64_t round);
  // local - base, in the scratch.
  ConstFloatSpan delta(ConstFloatSpan local, ConstFloatSpan base);
  // `delta` encoded with its class's codec and error feedback on `stream` (`shape`: the
  // segment's matrix, for powersgd); returns the codec that wrote the payload.
  compression::CodecId encode(bool critical, uint64_t stream, ConstFloatSpan delta, Bytes& out,
                              compression::MatrixShape shape = {});
  // `delta` in fp32, no error feedback (the flush).
  compression::CodecId encode_fp32(ConstFloatSpan delta, Bytes& out);
  // Drops every segment's residual of `shards` (the flush leaves them out of the final model).
  void reset(const std::vector<LeaderShard>& shards);

  // The residuals, "critical.<stream>" / "noncritical.<stream>", and the codecs' state per
  // stream (powersgd's Q), "critical.state.<stream>" / "noncritical.state.<stream>".
  std::map<std::string, std::vector<float>> residuals() const;
  // Restores them. InputError naming the stream when it is not one of `shards`' segments or has
  // another length (a state: not one its codec keeps for that segment); nothing changes then.
  void restore(const std::map<std::string, std::vector<float>>& residuals,
               const std::vector<LeaderShard>& shards);

 private:
  struct Class {
    compression::CodecSchedule schedule;
    compression::ErrorFeedback ef;
    size_t phase = 0;  // the schedule's phase ef encodes with now
    const char* name;  // in residual names and logs
  };
  Class& of(bool critical) { return critical ? critical_ : noncritical_; }

  std::string region_;
  Class critical_, noncritical_;
  std::vector<float> scratch_;
};

}  // namespace geotrain::worker
