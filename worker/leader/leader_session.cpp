#include "worker/leader/leader_session.hpp"

#include "core/error.hpp"
#include "core/metrics_events.hpp"
#include "worker/run/worker_events.hpp"

namespace geotrain::worker {

LeaderSession::LeaderSession(const ParamTable& table, SyncConfig sync, StreamingConfig streaming,
                             wire::Context& context)
    : sync_(std::make_unique<RegionSync>(table, std::move(sync), context)),
      streaming_config_(streaming) {}

LeaderSession::~LeaderSession() {
  streaming_.reset();  // the background exchange ends before the RegionSync it drives
  sync_.reset();
}

uint64_t LeaderSession::connect(uint64_t resume_round, ResumeRound how) {
  const uint64_t next = sync_->connect(resume_round, how);
  // The schedule follows the servers' fragment count (their hellos; RegionSync took it), and a
  // default delay follows it (H / P).
  auto& sc = streaming_config_;
  if (sc.fragments != sync_->config().fragments) {
    sc.fragments = sync_->config().fragments;
    sc.delay =
        FragmentSchedule::merge_delay(sc.mode, sc.local_steps, sc.fragments, sc.written_delay);
    GT_REQUIRE(sc.fragments <= sc.local_steps,
               "region {}: the servers cut {} fragments, more than worker.local_steps = {} (each "
               "fragment needs its own step in the round)",
               sync_->config().region, sc.fragments, sc.local_steps);
  }
  streaming_ = std::make_unique<StreamingSync>(*sync_, streaming_config_);
  return next;
}

std::vector<RoundReport> LeaderSession::after_step(uint64_t step, FloatSpan local) {
  return after_step(schedule().position(step), local);
}

std::vector<RoundReport> LeaderSession::after_step(const StepPosition& at, FloatSpan local) {
  GT_ASSERT(streaming_ != nullptr && !finished_, "after_step before connect, or after finish");
  auto reports = streaming_->after_step(at, local);
  merged_.insert(merged_.end(), reports.begin(), reports.end());
  return reports;
}

std::vector<RoundReport> LeaderSession::finish(uint64_t last_step, FloatSpan local, RunEnd end) {
  GT_ASSERT(streaming_ != nullptr && !finished_, "finish before connect, or twice");
  if (sync_->flushed_before_connect()) {
    // The region's run ended before this leader started (it was restarted after its flush):
    // nothing is in flight or owed, and flush() only pulls the global model.
    finished_ = true;
    streaming_.reset();
    return {};
  }
  auto reports = streaming_->finish(last_step, local, end);
  merged_.insert(merged_.end(), reports.begin(), reports.end());
  finished_ = true;
  // Nothing runs in the background from here on but the heartbeat; the flush merges the
  // deferred shards left to it by the StreamingSync's rule.
  if (end == RunEnd::no_flush) streaming_.reset();
  return reports;
}

nlohmann::json LeaderSession::take_round_fields() {
  auto fields = exchange_fields(merged_);
  merged_.clear();
  if (streaming_) {
    const auto times = streaming_->take_boundary_times();
    fields[events::field::boundary_start_s] = times.start;
    fields[events::field::boundary_merge_s] = times.merge;
    fields[events::field::boundary_commit_s] = times.commit;
  }
  return fields;
}

std::map<std::string, std::vector<float>> LeaderSession::residuals() {
  // After finish() nothing runs in the background: the RegionSync's own are the residuals.
  return streaming_ ? streaming_->residuals() : sync_->residuals();
}

FlushReport LeaderSession::flush(FloatSpan local) {
  if (!streaming_) return sync_->flush(local);
  const auto report = streaming_->flush(local);
  streaming_.reset();
  return report;
}

void LeaderSession::goodbye(std::chrono::milliseconds wait) {
  streaming_.reset();
  sync_->goodbye(wait);
}

}  // namespace geotrain::worker
