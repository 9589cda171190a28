#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>

#include "core/metrics_events.hpp"
#include "worker/run/worker_run.hpp"

namespace geotrain::worker {

namespace f = events::field;

void WorkerRun::log_rejoin(const RegionPosition& at, Clock::time_point t0) {
  log_->write(events::name::rejoin, {{f::region, region_},
                                     {f::rank, rank_},
                                     {f::round, at.round},
                                     {f::step, steps_taken_},
                                     {f::epoch, region_group_->epoch()},
                                     {f::seconds, since(t0)}});
}

RegionPosition WorkerRun::rejoin(std::stop_token stop) {
  // A restarted worker, admitted to its region's live group (or finding training over).
  if (!comm()) return {config_.rounds + 1};
  if (leader_) return lead_again(std::move(stop));
  const auto t0 = Clock::now();
  RegionPosition at;
  take_state(at, 0);
  log_rejoin(at, t0);
  spdlog::info("worker {}-{}: rejoined the region's group at round {} (step {} of {})", region_,
               rank_, at.round, at.done, at.steps);
  return at;
}

void WorkerRun::regroup(RegionPosition& at, const std::string& why) {
  const auto t0 = Clock::now();
  // This member's place (the leader's decides): a step it finished counts (its exchange is done),
  // one it abandoned not.
  if (at.steps > 0) at.done = static_cast<uint32_t>(steps_taken_ - round_start_steps_);
  // Long enough for a member in the middle of its step's compute to notice and announce itself.
  const auto window =
      std::chrono::milliseconds(200 + static_cast<int64_t>(3000 * std::min(last_step_s_, 10.0)));
  spdlog::warn("worker {}-{}: the region's group re-forms: {}", region_, rank_, why);
  const auto change = region_group_->regroup(window);
  if (change.fresh_leader) take_state(at, 1);  // the leader started again takes ours first
  take_state(at, 0);
  round_start_steps_ = steps_taken_ - at.done;
  spdlog::warn(
      "worker {}-{}: the region's group is {} worker(s) at epoch {} after {:.2f} s; "
      "round {} goes on from step {} of {}",
      region_, rank_, change.members.size(), change.epoch, since(t0), at.round, at.done, at.steps);
  log_->write(events::name::regroup, {{f::region, region_},
                                      {f::rank, rank_},
                                      {f::round, at.round},
                                      {f::epoch, change.epoch},
                                      {f::members, change.members},
                                      {f::lost, change.lost},
                                      {f::joined, change.joined},
                                      {f::reason, why},
                                      {f::seconds, since(t0)}});
}

RegionPosition WorkerRun::lead_again(std::stop_token stop) {
  const auto t0 = Clock::now();
  RegionPosition at;
  take_state(at, 1, /*open_data=*/false);  // opened below, at the servers' round
  // No exchange in flight: the merges its predecessor's pushes were due are not coming (it
  // broadcasts at the merges of its own pushes only); its members take its empty calendar.
  calendar_.restore({});
  // The data, read meanwhile at the start of the members' round (where the servers most likely
  // say the region goes on: a second or so for a dataset on 2 cores).
  const uint64_t guess = std::max<uint64_t>(at.round, 1);
  auto opening = std::async(std::launch::async, [this, guess] {
    open_data((guess - 1) * config_.local_steps * config_.accumulation_steps);
  });
  // The servers' values: the region's progress since its last exchange, and the dead leader's
  // uplink residuals, are lost (as from a snapshot); the optimizer state is the members'. At the
  // members' round, whatever the servers count (mapped onto it, LeaderShards::align): their
  // schedules of merges follow it, and a leader at another round would meet them at a different
  // collective (a step's AllReduce against a merge's broadcast) until Gloo's timeout.
  uint64_t next = connect_leader(std::move(stop), guess, ResumeRound::exactly);
  opening.get();
  if (session_->sync().flushed_before_connect()) next = config_.rounds + 1;
  schedule_.fragments = session_->schedule().fragments;
  schedule_.delay = session_->schedule().delay;
  calendar_.set_schedule(schedule_);
  steps_taken_ = (next - 1) * config_.local_steps;
  step_->set_steps(steps_taken_);
  if (next != guess) open_data(steps_taken_ * config_.accumulation_steps);
  at = {next};
  take_state(at, 0);
  log_rejoin(at, t0);
  spdlog::info(
      "worker {}-{}: leads its region again from round {}, with the state of the {} "
      "worker(s) that outlived it",
      region_, rank_, at.round, group_size() - 1);
  return at;
}

void WorkerRun::take_state(RegionPosition& at, int root, bool open_data) {
  RegionState mine{at, capture_worker_state(*step_, 0, 0, {})};
  mine.at.steps_taken = steps_taken_;
  mine.at.micro_batches = data_ ? data_->position() : 0;
  mine.at.fragments = schedule_.fragments;
  mine.at.delay = schedule_.delay;
  mine.at.merges = calendar_.pending();
  engine_->capture(params_, mine.state);
  const auto got = resync_from(*comm(), root, std::move(mine));
  step_->discard_accumulated();  // a step abandoned when the group broke
  if (comm()->rank() != root) {
    const auto& st = got.state;
    step_->optimizer().restore(st.optimizer_m, st.optimizer_v, st.optimizer_steps);
    step_->guard().restore(st.guard_losses, st.guard_skipped);
    step_->set_steps(st.steps);
    std::copy(st.params.begin(), st.params.end(), params_.begin());
    steps_taken_ = got.at.steps_taken;
    schedule_.fragments = got.at.fragments;
    schedule_.delay = got.at.delay;
    calendar_.set_schedule(schedule_);
    calendar_.restore(got.at.merges);  // a restarted worker's is empty, its leader's not
    if (open_data && (!data_ || data_->position() != got.at.micro_batches))
      this->open_data(got.at.micro_batches);
  }
  engine_->to_device(params_);
  at = got.at;
}

}  // namespace geotrain::worker
