// LeaderSession: a region leader's exchange with the servers for a whole run, as the native
// trainer (worker/run/trainer.cpp) and the Python API (geotrain.RegionSync, python/src/
// sync_bindings.cpp) both drive it, so that the round logic exists once: the RegionSync (the
// servers), the StreamingSync (the fragment schedule and overlap, made once connected), and the
// reports of the exchanges merged since the round event last took them.
//
// Order of calls: sync() for connect-time settings (set_origin, stop_waits_on); connect(); then
// after_step() after every local step and take_round_fields() at each round's end; finish() at
// the end of training, then flush() (the global model) and goodbye(). Members are destroyed in
// reverse: the streaming thread first, then the RegionSync. One thread at a time.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wire/context.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/streaming_sync.hpp"

namespace geotrain::worker {

class LeaderSession {
 public:
  LeaderSession(const ParamTable& table, SyncConfig sync, StreamingConfig streaming,
                wire::Context& context);
  ~LeaderSession();
  LeaderSession(const LeaderSession&) = delete;
  LeaderSession& operator=(const LeaderSession&) = delete;

  RegionSync& sync() { return *sync_; }
  const RegionSync& sync() const { return *sync_; }
  const StreamingConfig& streaming_config() const { return streaming_config_; }
  // The fragment schedule this region follows (after connect(): with the servers' count).
  FragmentSchedule schedule() const { return streaming_config_.schedule(); }

  // RegionSync::connect(resume_round, how), then the schedule, with the servers' fragment count
  // (their hellos say it; streaming_config().fragments and .delay follow it when the config said
  // otherwise): InputError for a fragment delay beyond H, or more fragments than H. Returns the
  // round the region trains next.
  uint64_t connect(uint64_t resume_round = 0, ResumeRound how = ResumeRound::at_least);
  bool connected() const { return streaming_ != nullptr; }

  // After local step `step` (1-based over the run): merges the exchanges due, starts those due
  // (StreamingSync::after_step), in place on `local`. The reports are kept for
  // take_round_fields() too.
  std::vector<RoundReport> after_step(uint64_t step, FloatSpan local);
  // The same in rounds of any length (time-budgeted rounds; StreamingSync::after_step).
  std::vector<RoundReport> after_step(const StepPosition& at, FloatSpan local);
  // The end of training: what is in flight is merged (StreamingSync::finish); nothing runs in
  // the background afterwards but the heartbeat. With RunEnd::flush, flush() must follow: it
  // merges the deferred shards finish() left to it. Nothing to do for a region that had flushed
  // before connect() (RegionSync::flushed_before_connect).
  std::vector<RoundReport> finish(uint64_t last_step, FloatSpan local,
                                  RunEnd end = RunEnd::no_flush);
  // The round event's exchange fields (worker_events.hpp) of every exchange merged since the
  // last call; an empty object when none.
  nlohmann::json take_round_fields();

  // Whether exchanges run on their own thread (overlap or a fragment delay).
  bool background() const { return streaming_ && streaming_->background(); }
  // Whether the parameters are on a device (StreamingConfig::device_params, with background
  // exchanges): after_step() then takes an empty span, and finish() brings them to the host.
  bool params_on_device() const { return streaming_ && streaming_->params_on_device(); }
  // The uplink residuals for a snapshot (StreamingSync::residuals; not with background
  // exchanges; after finish(), the RegionSync's).
  std::map<std::string, std::vector<float>> residuals();

  // The end of a run, after finish(): RegionSync::flush (base() becomes the global model).
  FlushReport flush(FloatSpan local);
  // The region leaves (RegionSync::goodbye); stops the schedule first.
  void goodbye(std::chrono::milliseconds wait);

 private:
  std::unique_ptr<RegionSync> sync_;
  StreamingConfig streaming_config_;
  std::unique_ptr<StreamingSync> streaming_;
  std::vector<RoundReport> merged_;  // merged since the last take_round_fields()
  bool finished_ = false;            // finish() was called
};

}  // namespace geotrain::worker
