#include "worker/leader/streaming_sync.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.hpp"

namespace geotrain::worker {
namespace {

using Clock = std::chrono::steady_clock;  // seconds_since: worker/leader/reply_wait.hpp

// A fragment's shard ranges but those in `shards` (whole shards: RegionSync's deferred ones).
std::vector<ElementRange> without(const std::vector<ElementRange>& ranges,
                                  const std::vector<ElementRange>& shards) {
  std::vector<ElementRange> out;
  for (const auto& r : ranges)
    if (std::find(shards.begin(), shards.end(), r) == shards.end()) out.push_back(r);
  return out;
}

}  // namespace

StreamingSync::StreamingSync(RegionSync& sync, StreamingConfig config)
    : sync_(sync), config_(config) {
  GT_REQUIRE(config_.local_steps >= 1, "streaming: local_steps is 0");
  GT_REQUIRE(config_.fragments >= 1 && config_.fragments <= config_.local_steps,
             "worker.fragments is {}, must be in [1, local_steps = {}] (each fragment needs its "
             "own step in the round)",
             config_.fragments, config_.local_steps);
  GT_REQUIRE(config_.fragments == sync_.config().fragments,
             "streaming: {} fragments, the region's sync was built for {}", config_.fragments,
             sync_.config().fragments);
  GT_REQUIRE(config_.delay <= config_.local_steps,
             "worker.fragment_delay is {} steps, must be at most local_steps = {} (a fragment's "
             "exchange must be merged before its next one starts)",
             config_.delay, config_.local_steps);
  GT_REQUIRE(config_.delay == 0 || config_.mode != OverlapMode::off,
             "streaming: a delay of {} steps needs an overlap mode", config_.delay);
  for (uint32_t p = 0; p < sync_.config().fragment_count(); ++p)
    ranges_.push_back(sync_.fragment_ranges(p));
  last_start_.assign(ranges_.size(), 0);
  deferred_.resize(ranges_.size());
  late_.resize(ranges_.size());
  if (background() && config_.device_params)
    device_ = config_.device_params(config_.mode, config_.outer, config_.regions, sync_.base());
  else if (background())
    host_ = HostLeaderParams(
        std::make_unique<OverlapMerge>(config_.mode, config_.outer, config_.regions, sync_.base()));
  thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
}

StreamingSync::~StreamingSync() {
  if (thread_.joinable()) {
    thread_.request_stop();
    wake_.notify_all();
  }
}

std::shared_ptr<StreamingSync::Job> StreamingSync::new_job(uint32_t fragment) {
  auto job = std::make_shared<Job>();
  job->fragment = fragment;
  std::vector<HostTable*> buffers{&job->push};
  if (device_) buffers.push_back(&job->staging);
  for (auto* buffer : buffers) {
    if (!spare_.empty()) {
      *buffer = std::move(spare_.back());
      spare_.pop_back();
    } else {
      LeaderParams& owner = device_ ? static_cast<LeaderParams&>(*device_) : host_;
      *buffer = owner.host_table(sync_.base().size());
    }
  }
  return job;
}

void StreamingSync::finished(Job& job) {
  for (auto* buffer : {&job.push, &job.staging})
    if (buffer->size() > 0) spare_.push_back(std::move(*buffer));
}

ConstFloatSpan StreamingSync::global(const Job& job) const {
  return job.staging.size() > 0 ? ConstFloatSpan(job.staging) : sync_.base();
}

std::vector<ElementRange> StreamingSync::take_late(Job& job) {
  auto& deferred = deferred_[job.fragment];
  if (deferred.empty()) return {};
  std::unique_lock in_use(sync_mutex_, std::try_to_lock);
  if (!in_use.owns_lock()) return {};
  auto ready = sync_.take_ready(job.fragment);
  for (const auto& r : ready) {
    if (job.staging.size() > 0)
      std::copy(sync_.base().begin() + r.offset, sync_.base().begin() + r.end(),
                job.staging.span().begin() + r.offset);
    std::erase(deferred, r);
  }
  return ready;
}

void StreamingSync::merge_late(Job& job, LeaderParams& params) {
  for (const auto& r : take_late(job)) {
    params.merge(r, global(job));
    ++late_[job.fragment];
  }
}

void StreamingSync::copy_ranges(uint32_t fragment, ConstFloatSpan from, FloatSpan to) const {
  for (const auto& r : ranges_[fragment])
    std::copy(from.begin() + r.offset, from.begin() + r.end(), to.begin() + r.offset);
}

void StreamingSync::loop(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    // Idle: wake for work, or every heartbeat interval to keep the servers from declaring us dead.
    wake_.wait_for(lock, stop, sync_.config().heartbeat, [&] { return !queue_.empty(); });
    if (stop.stop_requested()) break;
    if (queue_.empty()) {
      lock.unlock();
      try {
        std::lock_guard in_use(sync_mutex_);
        sync_.keep_alive();
      } catch (...) {
        // A failed heartbeat is reported by the next exchange, which talks to the same servers.
      }
      lock.lock();
      continue;
    }
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    std::optional<RoundReport> report;
    std::exception_ptr error;
    try {
      std::lock_guard in_use(sync_mutex_);
      report = sync_.exchange(job->push, job->fragment, job->defer, job->tokens);
      // Staged here, off the training thread, for a device's merge (Job::staging).
      if (job->staging.size() > 0) copy_ranges(job->fragment, sync_.base(), job->staging);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    job->report = report;
    job->error = error;
    job->done = true;
    wake_.notify_all();
  }
}

LeaderParams& StreamingSync::local(FloatSpan params) {
  if (device_) {
    GT_REQUIRE(params.empty(), "streaming: the parameters are on the device, {} host values given",
               params.size());
    return *device_;
  }
  GT_REQUIRE(params.size() == sync_.base().size(),
             "streaming: {} local parameters, the table has {}", params.size(),
             sync_.base().size());
  host_.bind(params);
  return host_;
}

RoundReport StreamingSync::wait_and_merge(Job& job, LeaderParams& params) {
  const auto t0 = Clock::now();
  {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return job.done; });
    if (job.error) std::rethrow_exception(job.error);
  }
  GT_ASSERT(job.report.has_value(), "exchange finished without a report");
  job.report->merge_wait_seconds = seconds_since(t0);
  const auto t1 = Clock::now();
  // Deferred shards keep their local values (and their start) until their replies come; those
  // that have come by now are merged here and started again with the fragment (take_late).
  deferred_[job.fragment] = job.report->deferred;
  const auto late = take_late(job);
  job.report->late_shards +=
      static_cast<uint32_t>(late.size()) + std::exchange(late_[job.fragment], 0);
  // Their progress since their start is pushed by the next start, or by finish().
  if (!late.empty()) last_start_[job.fragment] = 0;
  for (const auto& r : without(ranges_[job.fragment], deferred_[job.fragment]))
    params.merge(r, global(job));
  boundary_.merge += seconds_since(t1);
  return *job.report;
}

RoundReport StreamingSync::run_blocking(uint32_t fragment, uint64_t tokens) {
  GT_ASSERT(!device_, "a blocking exchange of parameters on the device");
  const auto t0 = Clock::now();
  std::lock_guard in_use(sync_mutex_);
  RoundReport report = sync_.exchange(host_.span(), fragment, false, tokens);
  report.merge_wait_seconds = seconds_since(t0);
  // (with a rule: the final exchanges of an overlapped run; the next start measures from here)
  const auto t1 = Clock::now();
  for (const auto& r : ranges_[fragment]) host_.take_global(r, sync_.base());
  boundary_.merge += seconds_since(t1);
  return report;
}

RoundReport StreamingSync::run_queued(uint32_t fragment, LeaderParams& params, uint64_t tokens) {
  // Behind the exchanges already queued, in the order every region queues them: taking the
  // connection ahead of them could wait for another region's exchange that waits for ours.
  auto job = new_job(fragment);
  job->defer = false;  // it takes the global values at once
  job->tokens = tokens;
  const auto t_read = Clock::now();
  for (const auto& r : ranges_[fragment]) params.read(r, job->push);
  boundary_.start += seconds_since(t_read);
  const auto t0 = Clock::now();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job);
  }
  wake_.notify_all();
  {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return job->done; });
    if (job->error) std::rethrow_exception(job->error);
  }
  GT_ASSERT(job->report.has_value(), "exchange finished without a report");
  job->report->merge_wait_seconds = seconds_since(t0);
  const auto t1 = Clock::now();
  for (const auto& r : ranges_[fragment]) params.take_global(r, global(*job));
  boundary_.merge += seconds_since(t1);
  const RoundReport report = *job->report;
  finished(*job);
  return report;
}

std::vector<RoundReport> StreamingSync::after_step(uint64_t step, FloatSpan host_params) {
  return after_step(config_.schedule().position(step), host_params);
}

uint64_t StreamingSync::take_tokens(uint32_t fragment, uint64_t step) {
  if (pushed_at_.empty()) return 0;  // before the first step: nothing trained
  const uint64_t steps = step > pushed_at_[fragment] ? step - pushed_at_[fragment] : 0;
  pushed_at_[fragment] = step;
  return steps * config_.tokens_per_step;
}

std::vector<RoundReport> StreamingSync::after_step(const StepPosition& at, FloatSpan host_params) {
  LeaderParams& params = local(host_params);
  if (pushed_at_.empty()) pushed_at_.assign(ranges_.size(), at.step - 1);
  std::vector<RoundReport> merged;
  const auto merge_front = [&] {
    merged.push_back(wait_and_merge(*in_flight_.front(), params));
    finished(*in_flight_.front());
    in_flight_.pop_front();
  };
  // Merges first: a fragment due again at this step must take its last result in before it
  // pushes (delay == H), and so must one due again before its delay is over (a round shorter
  // than H: time-budgeted rounds), with the exchanges started before it (MergeCalendar).
  while (!in_flight_.empty() && in_flight_.front()->merge_at <= at.step) merge_front();
  for (uint32_t p = 0; p < config_.fragments; ++p) {
    if (!config_.schedule().due(at, p)) continue;
    const auto mine = std::find_if(in_flight_.begin(), in_flight_.end(),
                                   [p](const auto& job) { return job->fragment == p; });
    if (mine == in_flight_.end()) continue;
    // Its job and those started before it (merging pops them: count first).
    for (auto n = std::distance(in_flight_.begin(), mine) + 1; n > 0; --n) merge_front();
  }
  // The critical fragment: every round boundary, blocking, before the streamed fragments due now.
  if (sync_.config().critical_fragment && at.round_end()) {
    const uint32_t critical = config_.fragments;
    last_start_[critical] = at.step;
    const uint64_t tokens = take_tokens(critical, at.step);
    merged.push_back(background() ? run_queued(critical, params, tokens)
                                  : run_blocking(critical, tokens));
  }
  for (uint32_t p = 0; p < config_.fragments; ++p) {
    if (!config_.schedule().due(at, p)) continue;
    last_start_[p] = at.step;
    const uint64_t tokens = take_tokens(p, at.step);
    if (!background()) {
      merged.push_back(run_blocking(p, tokens));
      continue;
    }
    auto job = new_job(p);
    job->merge_at = at.step + config_.delay;
    job->tokens = tokens;
    const auto t0 = Clock::now();
    merge_late(*job, params);
    for (const auto& r : without(ranges_[p], deferred_[p])) params.start(r, job->push);
    boundary_.start += seconds_since(t0);
    in_flight_.push_back(job);
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(job);
    }
    wake_.notify_all();
  }
  const auto t0 = Clock::now();
  params.commit();
  boundary_.commit += seconds_since(t0);
  return merged;
}

std::map<std::string, std::vector<float>> StreamingSync::residuals() {
  GT_ASSERT(!background(), "residuals() with a background exchange");
  std::lock_guard in_use(sync_mutex_);
  return sync_.residuals();
}

std::vector<RoundReport> StreamingSync::finish(uint64_t last_step, FloatSpan params, RunEnd end) {
  // From here on the parameters are the host's: the few exchanges left, the flush and the final
  // model read them there.
  if (device_) {
    GT_REQUIRE(params.size() == sync_.base().size(),
               "streaming: {} local parameters to finish with, the table has {}", params.size(),
               sync_.base().size());
    host_ = HostLeaderParams(device_->to_host(params));
    device_.reset();
  }
  host_.bind(params);
  std::vector<RoundReport> merged;
  while (!in_flight_.empty()) {
    merged.push_back(wait_and_merge(*in_flight_.front(), host_));
    finished(*in_flight_.front());
    in_flight_.pop_front();
  }
  if (auto* rule = host_.rule()) {
    std::lock_guard in_use(sync_mutex_);
    if (end == RunEnd::flush) {
      // The deferred shards whose replies have come are merged; the others are left to the
      // flush, which sends them last (RegionSync::flush): waiting for them here could wait for a
      // push that another region, finishing too, never makes.
      for (uint32_t p = 0; p < ranges_.size(); ++p)
        for (const auto& r : sync_.take_ready(p)) {
          rule->merge(r.offset, r.count, params, sync_.base());
          std::erase(deferred_[p], r);
          last_start_[p] = 0;
        }
    } else {
      // Deferred shards: waited for and merged; their progress since is pushed below.
      const auto settled = sync_.settle();
      for (const auto& r : settled) rule->merge(r.offset, r.count, params, sync_.base());
      for (uint32_t p = 0; p < ranges_.size(); ++p) {
        if (without(ranges_[p], settled).size() < ranges_[p].size()) last_start_[p] = 0;
        deferred_[p].clear();
      }
    }
  }
  // Progress not pushed yet (fragments due before the last step): one more exchange each; a
  // fragment with shards still deferred leaves it to the flush.
  for (uint32_t p = 0; p < ranges_.size(); ++p)
    if (last_start_[p] < last_step && deferred_[p].empty())
      merged.push_back(run_blocking(p, take_tokens(p, last_step)));
  return merged;
}

FlushReport StreamingSync::flush(FloatSpan params) {
  GT_ASSERT(!device_, "flush before finish");
  std::lock_guard in_use(sync_mutex_);
  auto* rule = host_.rule();
  if (rule == nullptr) return sync_.flush(params);  // nothing is ever deferred
  return sync_.flush(
      params, [&](const ElementRange& r) { rule->merge(r.offset, r.count, params, sync_.base()); });
}

}  // namespace geotrain::worker
