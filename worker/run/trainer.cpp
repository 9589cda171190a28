#include "worker/run/trainer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.hpp"
#include "core/metrics_events.hpp"
#include "kernels/model_cpu.hpp"
#include "models/model_spec.hpp"
#include "worker/backend/backend_factory.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/backend/step_engine.hpp"
#include "worker/data/training_data.hpp"
#include "worker/leader/leader_config.hpp"
#include "worker/leader/leader_session.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/streaming_sync.hpp"
#include "worker/region/leader_wait.hpp"
#include "worker/run/final_model.hpp"
#include "worker/run/metrics_log.hpp"
#include "worker/run/region_collective.hpp"
#include "worker/run/region_resync.hpp"
#include "worker/run/snapshot_writer.hpp"
#include "worker/run/worker_checkpoint.hpp"
#include "worker/run/worker_events.hpp"
#include "worker/run/worker_metrics.hpp"
#include "worker/run/worker_resume.hpp"
#include "worker/run/worker_run.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/round_budget.hpp"

namespace geotrain::worker {

namespace f = events::field;

WorkerRun::WorkerRun(const WorkerConfig& config, const std::string& region, uint32_t region_index,
                     uint32_t rank, wire::Context& context, TrainerOptions options,
                     std::stop_token stop)
    : config_(config),
      schedule_{config.local_steps, config.fragments, config.merge_delay()},
      region_(region),
      region_index_(region_index),
      rank_(rank),
      context_(context),
      options_(options),
      leader_(rank == 0),
      per_region_(config.workers.in(region)),
      world_(config.workers.total()),
      model_(models::make_model(config.model)),
      table_(model_->make_table(config.model.critical)),
      params_(table_.total_elements()),
      snapshots_(worker_checkpoint_dir(config.run_dir, config.checkpoint.dir, region, rank),
                 config.checkpoint.keep),
      identity_(worker_identity(config, table_.layout_hash())) {
  // Subnormals flushed on the training thread and the threads started after it (the ops' pool,
  // OpenBLAS's, the exchange's): kernels/ops/threads.hpp says why.
  kernels::cpu::flush_denormals();
  kernels::cpu::set_blas_threads(static_cast<int>(config_.blas_threads));
  model_->init(params_, config_.seed);
  backend_ = make_model_backend(config_.device_in(region_), config_.model, static_cast<int>(rank_),
                                config_.precision_in(region_));
  // Data: read before anything connects, so that a bad corpus or dataset fails at once; a
  // resumed worker opens it once the servers said which round it trains (start()).
  if (!options_.resume && !options_.rejoin) open_data(0);
  connect_region(std::move(stop));
  auto lsc = local_step_config(config_, table_, *model_, world_);
  // ZeRO: this worker's range of the optimizer state.
  ZeroRegion zero{zero_shards(params_.size(), per_region_, config_.zero_stage, lsc.muon_matrices),
                  [this] { return comm(); }};
  lsc.take_range(zero.shards, rank_);
  step_ = std::make_unique<LocalStep>(lsc, params_.size());
  engine_ = make_step_engine(*backend_, *step_, config_.optimizer, lsc.decay_mask, std::move(zero));
  if (options_.resume) restore_snapshot();
  log_.emplace(worker_metrics_path(config_.run_dir, region_, rank_));
  if (config_.metrics_port > 0 || config_.metrics_port_auto) serve_metrics();
  auto start = start_event(config_, region_, rank_, world_, model_->kind(), params_.size(),
                           options_.resume, options_.generation);
  // What ZeRO leaves this worker (worker.zero_stage): its range of the optimizer state.
  start[f::zero_stage] = config_.zero_stage;
  start[f::optimizer_state_bytes] =
      (step_->optimizer().first_moment().size() + step_->optimizer().second_moment().size()) *
      sizeof(float);
  log_->write(events::name::start, start);
  if (exporter_)
    log_->write(events::name::metrics_endpoint,
                {{f::region, region_}, {f::rank, rank_}, {f::url, exporter_->url()}});
  if (config_.step_delay_ms.count(region_))
    delay_ = std::chrono::milliseconds(config_.step_delay_ms.at(region_));
  if (config_.step_time_ms.count(region_)) {
    std::vector<Slowdown> mine;
    for (const auto& s : config_.slowdowns)
      if (s.region == region_) mine.push_back(s);
    emulated_ = EmulatedStepTime(config_.step_time_ms.at(region_), std::move(mine));
  }
  // Time-budgeted rounds: the first round is planned at the emulated step time when there is
  // one, at H steps otherwise.
  if (config_.round_time_ms > 0 && leader_)
    budget_.emplace(config_.round_time_ms / 1000.0, config_.max_local_steps, config_.local_steps,
                    emulated_.on() ? emulated_.target_s(0) : 0.0);
}

void WorkerRun::serve_metrics() {
  const bool gpt = config_.model.kind == "gpt";
  metrics_ = std::make_unique<WorkerMetrics>(region_, rank_,
                                             uint64_t{config_.batch_size.in(region_)} *
                                                 config_.accumulation_steps *
                                                 (gpt ? config_.model.gpt.seq_len : 1),
                                             gpt ? "tokens" : "samples");
  log_->observe([m = metrics_.get()](const nlohmann::json& e) { m->add(e); });
  // P + the worker's global rank: every worker of a run on one machine has its own port, and a
  // scrape config can list them.
  const uint16_t port = config_.metrics_port_auto
                            ? uint16_t{0}
                            : static_cast<uint16_t>(config_.metrics_port +
                                                    config_.workers.first_rank(region_) + rank_);
  exporter_ = std::make_unique<MetricsExporter>(context_, config_.metrics_host, port,
                                                [m = metrics_.get()] { return m->render(); });
  spdlog::info("worker {}-{}: Prometheus metrics at {}", region_, rank_, exporter_->url());
}

void WorkerRun::open_data(uint64_t first_micro_batch) {
  if (data_) return data_->reposition(first_micro_batch);
  data_.emplace(config_, world_, config_.workers.first_rank(region_) + rank_, leader_,
                config_.max_total_steps() * config_.accumulation_steps, first_micro_batch);
}

void WorkerRun::connect_region(std::stop_token stop) {
  if (per_region_ <= 1) return;
  region_group_.emplace(config_, region_, rank_, context_, *backend_, options_.generation,
                        options_.rejoin, std::move(stop));
}

void WorkerRun::restore_snapshot() {
  resumed_ = agree_on_snapshot(snapshots_, identity_, comm(), rank_, group_size());
  if (!resumed_) {
    spdlog::info("worker {}-{}: --resume without a snapshot every rank has: starting fresh",
                 region_, rank_);
    return;
  }
  const auto folder = snapshots_.folder(resumed_->round);
  restore_worker_state(*resumed_, folder, *step_, params_);
  engine_->optimizer_to_device();
  spdlog::info("worker {}-{}: resuming from the snapshot of round {} in {}", region_, rank_,
               resumed_->round, folder.string());
}

// The leader's link to every region's server; returns the round the region trains next.
uint64_t WorkerRun::connect_leader(std::stop_token stop, uint64_t resume_at, ResumeRound how) {
  // The samples one round's delta stands for (the servers' token-weighted merge).
  const uint64_t tokens_per_round = config_.local_steps * config_.samples_per_step(region_);
  auto streaming = leader_streaming_config(config_, region_);
  // Device-resident training: the overlap rule runs beside the parameters on the device.
  if (auto* device = backend_->resident(); device != nullptr && config_.leader_on_device)
    streaming.device_params = [device](OverlapMode mode, OuterStepConfig outer, uint32_t regions,
                                       ConstFloatSpan global) {
      return device->leader_params(mode, outer, regions, global);
    };
  session_ = std::make_unique<LeaderSession>(
      table_, leader_sync_config(config_, region_, tokens_per_round), streaming, context_);
  RegionSync& sync = session_->sync();
  // The origin is the seed's initialisation, whatever a snapshot holds: the parameters
  // themselves unless a snapshot replaced them (initialising again costs seconds on a large
  // model: GPT-2 124M's takes 4.9 s on the development machine).
  const bool replaced = resumed_ || options_.rejoin;  // by a snapshot, or by the members' state
  std::vector<float> origin = replaced ? std::vector<float>(params_.size()) : params_;
  if (replaced) model_->init(origin, config_.seed);
  sync.set_origin(origin);
  sync.stop_waits_on(std::move(stop));
  const uint64_t next = session_->connect(resume_at, how);
  log_->write(events::name::connect, {{f::region, region_},
                                      {f::next_round, next},
                                      {f::startup_bytes_pulled, sync.startup_bytes_pulled()},
                                      {f::fragments, session_->schedule().fragments},
                                      {f::fragment_delay, session_->schedule().delay}});
  if (options_.resume)
    log_->write(events::name::resume, resume_leader(resumed_, next, sync, params_, region_));
  std::copy(sync.base().begin(), sync.base().end(), params_.begin());
  params_on_device_ = session_->params_on_device();
  if (params_on_device_)
    spdlog::info("worker {}-{}: the overlap rule runs beside the parameters on the device", region_,
                 rank_);
  return next;
}

RegionPosition WorkerRun::start(std::stop_token stop) {
  if (options_.rejoin) return rejoin(std::move(stop));
  // The leader tells its region the round it trains first and the schedule (floats: exact for
  // counts below 2^24).
  std::vector<float> start{1.0f, static_cast<float>(schedule_.fragments),
                           static_cast<float>(schedule_.delay)};
  if (leader_) {
    start[0] =
        static_cast<float>(connect_leader(std::move(stop), resumed_ ? resumed_->round + 1 : 0));
    // Restarted during or after the region's flush (killed during its final evaluation, say):
    // the run's rounds are over; the end flushes what is still owed, pulls the global model
    // again and evaluates it.
    if (session_->sync().flushed_before_connect()) {
      spdlog::warn("worker {}-{}: the servers say this region flushed already: no more rounds",
                   region_, rank_);
      start[0] = static_cast<float>(config_.rounds + 1);
    }
    start[1] = static_cast<float>(session_->schedule().fragments);
    start[2] = static_cast<float>(session_->schedule().delay);
  }
  if (comm()) {
    comm()->broadcast(start, 0);
    comm()->broadcast(params_, 0);
  }
  schedule_.fragments = static_cast<uint32_t>(start[1]);
  schedule_.delay = static_cast<uint32_t>(start[2]);
  calendar_.set_schedule(schedule_);
  engine_->to_device(params_);
  const auto first = static_cast<uint64_t>(start[0]);
  // A resumed worker trains round t on round t's data, at round t's schedule step. Rounds of
  // varying length: the snapshot's own count when it is of the round before (else H a round).
  steps_taken_ = (first - 1) * config_.local_steps;
  if (options_.resume) {
    const bool own = config_.round_time_ms > 0 && resumed_ && resumed_->round + 1 == first;
    if (own) steps_taken_ = resumed_->steps;
    step_->set_steps(steps_taken_);
    open_data(own ? resumed_->micro_batches : steps_taken_ * config_.accumulation_steps);
  }
  return {first};
}

WorkerRun::RoundPlan WorkerRun::plan_round(std::stop_token stop) {
  if (leader_ && !planned_) planned_ = budget_ ? budget_->plan() : config_.local_steps;
  const uint32_t steps = leader_ ? *planned_ : 0;
  const bool joiners = leader_ && region_group_ && region_group_->joiners_waiting();
  std::vector<float> plan{stop.stop_requested() ? 1.0f : 0.0f, static_cast<float>(steps),
                          joiners ? 1.0f : 0.0f};
  if (comm()) comm()->allreduce_sum(plan);  // the leader's count: the others add 0
  const uint32_t agreed =
      config_.round_time_ms > 0 ? static_cast<uint32_t>(plan[1]) : config_.local_steps;
  GT_ASSERT(agreed >= 1, "a round of {} steps", agreed);
  return {plan[0] > 0.0f, plan[2] > 0.0f, agreed};
}

void WorkerRun::local_step(uint64_t round, uint32_t h, uint32_t steps) {
  const auto step_start = Clock::now();
  // Time-budgeted rounds: the schedule's place in the round, whatever the round's step count.
  if (config_.round_time_ms > 0)
    step_->set_schedule_position((round - 1) * config_.local_steps +
                                 uint64_t{h} * config_.local_steps / steps);
  double compute = 0, comm_s = 0, loss_sum = 0;
  for (uint32_t m = 0; m < config_.accumulation_steps; ++m) {
    const Batch batch = data_->next();
    const auto t0 = Clock::now();
    auto r = engine_->accumulate(params_, batch, m + 1 == config_.accumulation_steps);
    compute += since(t0);
    step_->add_micro_batch(r.mean_loss());
    loss_sum += r.mean_loss();
  }
  if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
  auto t0 = Clock::now();
  engine_->reduce_gradient();  // the region's sum (AllReduce when connected)
  if (comm()) {
    // The region's mean loss, so that every worker's anomaly guard takes the same decision.
    std::vector<float> loss{static_cast<float>(loss_sum / config_.accumulation_steps)};
    comm()->allreduce_sum(loss);
    step_->set_loss(double(loss[0]) / group_size());
  }
  comm_s += since(t0);
  // The optimizer's step as this thread sees it: on the host all of it (Muon's orthogonalisation
  // is a third of a CPU LM step); on the device-resident path its kernels are queued, and their
  // time shows in the next forward pass's compute_s, which waits for them.
  t0 = Clock::now();
  const StepReport report = engine_->apply(params_, group_size());
  const double optimizer_s = since(t0);
  // Emulated hardware: the step lasts its emulated time from its start, all of it but the
  // exchange and the optimizer counted as compute (the emulated device is busy, reading its
  // batches included); a step whose work took longer is an overrun.
  const uint64_t overruns_before = emulated_.overruns();
  const double worked = since(step_start);
  const double pad = emulated_.pad_s(worked, since(start_));
  if (pad > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(pad));
    compute = std::max(compute, worked + pad - comm_s - optimizer_s);
  }
  // The step's time on the hardware the region stands for: emulated, its emulated time (or its
  // real work when that overran), not the host's wake-up after the wait.
  if (budget_) budget_->record_step(emulated_.on() ? worked + pad : since(step_start));
  ++result_.steps;
  last_step_s_ = since(step_start);
  if (report.verdict != Verdict::kAccept) ++result_.skipped_steps;
  round_compute_ += compute;
  round_comm_ += comm_s;
  round_optimizer_ += optimizer_s;
  log_->write(events::name::step,
              step_event(region_, {.rank = rank_,
                                   .round = round,
                                   .step = report.step,
                                   .loss = report.loss,
                                   .lr = report.lr,
                                   .grad_norm = report.grad_norm,
                                   .compute_s = compute,
                                   .comm_s = comm_s,
                                   .optimizer_s = optimizer_s,
                                   .skipped = report.verdict != Verdict::kAccept,
                                   .overrun = emulated_.overruns() > overruns_before}));
  // The exchanges due after this step (every fragment's push, and the merges `delay` steps
  // later); every rank knows the schedule, so all take part in the broadcast that follows.
  const StepPosition at{++steps_taken_, h + 1, steps};
  const bool exchanged = calendar_.changes_after(at);
  if (leader_) {
    if (exchanged && !params_on_device_) engine_->to_host(params_);
    t0 = Clock::now();
    session_->after_step(at, params_on_device_ ? FloatSpan{} : FloatSpan(params_));
    round_wait_ += since(t0);
  }
  if (!exchanged) return;
  // The leader's parameters changed on the device: its region's other workers take them through
  // the host mirror.
  if (params_on_device_ && comm()) engine_->to_host(params_);
  if (comm()) comm()->broadcast(params_, 0);
  if (!params_on_device_) engine_->to_device(params_);
}

uint64_t WorkerRun::train(RegionPosition at, std::stop_token stop) {
  while (at.round <= config_.rounds) {
    try {
      if (at.steps == 0) {  // a round to plan
        const auto plan = plan_round(stop);
        if (plan.stop) break;
        if (plan.regroup) {
          regroup(at, "a restarted worker rejoins");
          continue;
        }
        at.steps = plan.steps;
        planned_.reset();
        round_start_steps_ = steps_taken_;
        round_compute_ = round_comm_ = round_optimizer_ = round_wait_ = 0;
      }
      for (; at.done < at.steps; ++at.done) local_step(at.round, at.done, at.steps);
      end_round(at.round, at.steps, stop);
      at = {at.round + 1};
    } catch (const GroupBroken& e) {
      if (!region_group_ || !region_group_->elastic()) throw;
      regroup(at, e.what());
    }
  }
  if (leader_ && region_group_) region_group_->close();  // no more admissions
  return at.round;
}

// The leader's round event (and the evaluation every eval_every rounds); every rank's snapshot.
void WorkerRun::end_round(uint64_t round, uint32_t steps, std::stop_token stop) {
  if (round <= last_ended_round_) return;  // ended before its group re-formed
  last_ended_round_ = round;
  ++result_.rounds;
  if (leader_) {
    log_->write(events::name::round,
                round_event(region_, round, steps,
                            {round_compute_, round_comm_, round_optimizer_, round_wait_},
                            session_->take_round_fields()));
    if (config_.eval_every > 0 && round % config_.eval_every == 0 && round < config_.rounds) {
      engine_->to_host(params_);
      log_->write(events::name::eval, eval_event(region_, data_->evaluate(*backend_, params_),
                                                 round, result_.steps, tokens_per_step()));
    }
  }
  // worker.checkpoint: every N rounds, at the last round and when stopped, so that --resume
  // continues where this worker stops.
  if (config_.checkpoint.every > 0 &&
      (round % config_.checkpoint.every == 0 || round == config_.rounds || stop.stop_requested()))
    write_snapshot(round);
  log_snapshots();
}

void WorkerRun::write_snapshot(uint64_t round) {
  // A background exchange owns the RegionSync now: its residuals are not read (with overlap, a
  // snapshot holds none, docs/run.md).
  std::map<std::string, std::vector<float>> residuals;
  if (leader_ && !session_->background()) residuals = session_->residuals();
  auto s = capture_worker_state(*step_, round, data_->position(), std::move(residuals));
  engine_->capture(params_, s);
  s.region = region_;
  s.rank = rank_;
  s.seed = config_.seed;
  s.identity = identity_;
  snapshot_writer_.submit(std::move(s));
}

void WorkerRun::log_snapshots() {
  for (const auto& w : snapshot_writer_.written())
    log_->write(events::name::checkpoint, {{f::region, region_},
                                           {f::rank, rank_},
                                           {f::round, w.round},
                                           {f::path, w.folder.string()}});
}

Trainer::Trainer(WorkerConfig config, std::string region, uint32_t rank, wire::Context& context,
                 TrainerOptions options)
    : config_(std::move(config)),
      region_(std::move(region)),
      rank_(rank),
      context_(context),
      options_(options) {
  region_index_ = config_.region_index(region_);
  GT_REQUIRE(rank_ < config_.workers.in(region_),
             "rank {} is not below region {}'s worker.workers_per_region = {}", rank_, region_,
             config_.workers.in(region_));
  require_device_available(
      config_.device_in(region_));  // device: cuda needs a CUDA + NCCL build and a GPU
  for (const auto& r : config_.regions)
    GT_REQUIRE(
        config_.server_endpoints.count(r) ||
            (config_.routes.count(region_) && config_.routes.at(region_).count(r)),
        "server.endpoints has no entry for region '{}' (every region's server must be reachable)",
        r);
}

TrainResult Trainer::run(std::stop_token stop) {
  WorkerRun run(config_, region_, region_index_, rank_, context_, options_, stop);
  return run.finish(run.train(run.start(stop), stop));
}

}  // namespace geotrain::worker
