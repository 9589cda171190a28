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
#include "worker/training/local_step.hpp"
#include "worker/training/round_budget.hpp"

namespace geotrain::worker {
namespace {

namespace f = events::field;

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One run of a worker, in the order Trainer::run calls it: the constructor builds what every
// rank needs (model, data, the region's collective, the local step, a snapshot to resume
// from); start() connects the leader to the servers and gives every rank the first round and
// its parameters; train() runs the rounds: plan_round() agrees on whether to go on and on the
// round's step count (H, or what fits in worker.round_time_ms), local_step() is one step (and the
// exchanges due after it), end_round() the round event, evaluation and snapshot; when the
// region's group breaks (an elastic region's member died) or admits a restarted worker, regroup()
// re-forms it and every member takes the leader's state and place. finish() takes in what is in
// flight, makes the global model and writes the `done` event.
class WorkerRun {
 public:
  // `stop` ends the rendezvous with the region's other ranks (ServerStore).
  WorkerRun(const WorkerConfig& config, const std::string& region, uint32_t region_index,
            uint32_t rank, zmq::context_t& context, TrainerOptions options, std::stop_token stop);
  // `stop` also ends the leader's waits for a dead server (RegionSync::stop_waits_on). Where
  // training starts: a round's beginning, or for a restarted worker (--rejoin) the leader's place.
  RegionPosition start(std::stop_token stop);
  // The rounds from `at` on; returns the round after the last one trained.
  uint64_t train(RegionPosition at, std::stop_token stop);
  // Whether any rank of the region was asked to stop: a stop (SIGTERM) reaches the ranks at
  // slightly different times, and a rank that left the loop while another began a round would
  // wait in a collective the other never joins (until the group's timeout); and the round's
  // step count, the leader's (RoundBudget). Two floats a round.
  // And whether the region's group re-forms first: the leader saw a restarted worker asking to
  // join.
  struct RoundPlan {
    bool stop = false;
    bool regroup = false;
    uint32_t steps = 0;
  };
  RoundPlan plan_round(std::stop_token stop);
  TrainResult finish(uint64_t next_round);

 private:
  // Runs `leader_work` on the leader while the region's other ranks wait for it in a beat of
  // one-float collectives, each well inside the group's timeout, however long it takes; without
  // a region collective, just runs it. Rethrows the leader's error.
  void while_the_region_waits(const std::function<void()>& leader_work);
  // The leader's end of the exchange: what is in flight, the flush (the global model into
  // `final_model`), goodbye, the model file (the first region).
  void end_exchange(uint64_t next_round, std::optional<FinalModel>& final_model);
  void connect_region(std::stop_token stop);
  // The region's collective; null alone (one worker, or a joiner that found training over).
  Communicator* comm() { return region_group_ ? region_group_->comm() : nullptr; }
  uint32_t group_size() { return region_group_ ? region_group_->size() : 1; }
  // The group broke or admits a joiner (`why`): it re-forms, every member takes the leader's
  // state, and `at` becomes the leader's place.
  void regroup(RegionPosition& at, const std::string& why);
  // After a regroup: the state and place of the member of rank `root` (the leader's, or for a
  // leader started again the first member's) on every member (worker/run/region_resync.hpp).
  // `open_data`: open the data at the root's position (false: the caller opens it itself).
  void take_state(RegionPosition& at, int root, bool open_data = true);
  // A leader started again (--rejoin, rank 0): it takes the region's state from the members that
  // outlived it, rejoins the servers (which say where the region goes on, from their values) and
  // gives every member that; returns where training goes on.
  RegionPosition lead_again(std::stop_token stop);
  void restore_snapshot();
  uint64_t connect_leader(std::stop_token stop);
  void open_data(uint64_t first_micro_batch);
  void serve_metrics();
  // One local step (h of `steps`, 0-based): the micro-batches' forward/backward, the region's
  // reduction, the optimizer step, and the exchanges due after it.
  void local_step(uint64_t round, uint32_t h, uint32_t steps);
  // The round's event, evaluation and snapshot, once per round on each rank.
  void end_round(uint64_t round, uint32_t steps, std::stop_token stop);
  void write_snapshot(uint64_t round);
  // The `checkpoint` events of the snapshots written since the last call.
  void log_snapshots();
  uint64_t tokens_per_step() const {
    return config_.batch_size.global(config_.workers) * config_.accumulation_steps *
           data_->tokens_per_sample();
  }

  const WorkerConfig& config_;
  // The fragment schedule every rank of the region follows: the config's until start(), then
  // the leader's, whose fragment count the servers' hellos set (LeaderSession::connect).
  FragmentSchedule schedule_;
  MergeCalendar calendar_{schedule_};  // when the leader's exchanges change the parameters
  uint64_t steps_taken_ = 0;  // local steps over the run (resumed: from the snapshot's round)
  const std::string& region_;
  const uint32_t region_index_, rank_;
  zmq::context_t& context_;
  const TrainerOptions options_;
  const Clock::time_point start_ = Clock::now();
  const bool leader_;
  const uint32_t per_region_, world_;

  std::unique_ptr<models::Model> model_;  // the same initialisation in every process
  ParamTable table_;
  std::vector<float> params_;
  // Where forward/backward run (worker.device), and how the steps run there.
  std::unique_ptr<ModelBackend> backend_;
  std::unique_ptr<LocalStep> step_;
  std::unique_ptr<StepEngine> engine_;
  std::optional<TrainingData> data_;
  // Inside the region: Gloo (cpu, elastic) or NCCL (cuda), rendezvous at the region's own server.
  std::optional<RegionCollective> region_group_;
  // Snapshots of this worker's state, and the one it resumes from (--resume).
  WorkerCheckpointStore snapshots_;
  SnapshotWriter snapshot_writer_{snapshots_};  // writes them while training goes on
  uint64_t identity_;
  std::optional<WorkerCheckpointState> resumed_;
  std::optional<MetricsLog> log_;  // opened once set up, so that its times start there
  // worker.metrics_port: the same events as Prometheus metrics, served by their own thread
  // (destroyed before the metrics they render).
  std::unique_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<MetricsExporter> exporter_;
  // Across regions (the leader): the exchange with every region's server, for the whole run.
  std::unique_ptr<LeaderSession> session_;
  // The leader's parameters are the device's at its exchanges (StreamingSync::params_on_device):
  // params_ is refreshed only for an evaluation, a snapshot, a broadcast and the end.
  bool params_on_device_ = false;

  std::chrono::milliseconds delay_{0};  // worker.step_delay_ms: an artificially slow region
  EmulatedStepTime emulated_;           // worker.step_time_ms, worker.slowdowns
  std::optional<RoundBudget> budget_;   // worker.round_time_ms (the leader's)
  // The leader's plan for the round not begun yet (kept when the group re-forms before it).
  std::optional<uint32_t> planned_;
  uint64_t round_start_steps_ = 0;  // steps_taken_ when the round in progress began
  uint64_t last_ended_round_ = 0;   // end_round's last
  double last_step_s_ = 0;          // the last local step's wall time (the regroup window)
  TrainResult result_;
  double round_compute_ = 0, round_comm_ = 0, round_optimizer_ = 0, round_wait_ = 0;
};

WorkerRun::WorkerRun(const WorkerConfig& config, const std::string& region, uint32_t region_index,
                     uint32_t rank, zmq::context_t& context, TrainerOptions options,
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
  kernels::cpu::set_blas_threads(static_cast<int>(config_.blas_threads));
  model_->init(params_, config_.seed);
  backend_ =
      make_model_backend(config_.device, config_.model, static_cast<int>(rank_), config_.precision);
  // Data: read before anything connects, so that a bad corpus or dataset fails at once; a
  // resumed worker opens it once the servers said which round it trains (start()).
  if (!options_.resume && !options_.rejoin) open_data(0);
  connect_region(std::move(stop));
  const auto lsc = local_step_config(config_, table_, *model_, world_);
  step_ = std::make_unique<LocalStep>(lsc, params_.size());
  engine_ = make_step_engine(*backend_, *step_, config_.optimizer, lsc.decay_mask);
  if (options_.resume) restore_snapshot();
  log_.emplace(worker_metrics_path(config_.run_dir, region_, rank_));
  if (config_.metrics_port > 0 || config_.metrics_port_auto) serve_metrics();
  log_->write(events::name::start,
              start_event(config_, region_, rank_, world_, model_->kind(), params_.size(),
                          options_.resume, options_.generation));
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
uint64_t WorkerRun::connect_leader(std::stop_token stop) {
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
  const uint64_t next = session_->connect(resumed_ ? resumed_->round + 1 : 0);
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
  if (options_.rejoin) {
    // A restarted worker, admitted to its region's live group (or finding training over).
    if (!comm()) return {config_.rounds + 1};
    if (leader_) return lead_again(std::move(stop));
    const auto t0 = Clock::now();
    RegionPosition at;
    take_state(at, 0);
    log_->write(events::name::rejoin, {{f::region, region_},
                                       {f::rank, rank_},
                                       {f::round, at.round},
                                       {f::step, steps_taken_},
                                       {f::epoch, region_group_->epoch()},
                                       {f::seconds, since(t0)}});
    spdlog::info("worker {}-{}: rejoined the region's group at round {} (step {} of {})", region_,
                 rank_, at.round, at.done, at.steps);
    return at;
  }
  // The leader tells its region the round it trains first and the schedule (floats: exact for
  // counts below 2^24).
  std::vector<float> start{1.0f, static_cast<float>(schedule_.fragments),
                           static_cast<float>(schedule_.delay)};
  if (leader_) {
    start[0] = static_cast<float>(connect_leader(std::move(stop)));
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
  // Emulated hardware: the step lasts its emulated time from its start, the wait counted as
  // compute (the emulated device is busy); a step whose work took longer is an overrun.
  const uint64_t overruns_before = emulated_.overruns();
  const double worked = since(step_start);
  const double pad = emulated_.pad_s(worked, since(start_));
  if (pad > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(pad));
    compute += pad;
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
  log_->write(events::name::step, {{f::region, region_},
                                   {f::rank, rank_},
                                   {f::round, round},
                                   {f::step, report.step},
                                   {f::loss, report.loss},
                                   {f::lr, report.lr},
                                   {f::grad_norm, report.grad_norm},
                                   {f::compute_s, compute},
                                   {f::comm_s, comm_s},
                                   {f::optimizer_s, optimizer_s},
                                   {f::skipped, report.verdict != Verdict::kAccept},
                                   {f::overrun, emulated_.overruns() > overruns_before}});
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

void WorkerRun::regroup(RegionPosition& at, const std::string& why) {
  const auto t0 = Clock::now();
  // This member's place (the leader's decides): a step it finished counts (its exchange is done),
  // one it abandoned not.
  if (at.steps > 0) at.done = static_cast<uint32_t>(steps_taken_ - round_start_steps_);
  // Long enough for a member in the middle of its step's compute to notice and announce itself.
  const auto window = std::chrono::milliseconds(
      200 + static_cast<int64_t>(3000 * std::min(last_step_s_, 10.0)));
  spdlog::warn("worker {}-{}: the region's group re-forms: {}", region_, rank_, why);
  const auto change = region_group_->regroup(window);
  if (change.fresh_leader) take_state(at, 1);  // the leader started again takes ours first
  take_state(at, 0);
  round_start_steps_ = steps_taken_ - at.done;
  spdlog::warn("worker {}-{}: the region's group is {} worker(s) at epoch {} after {:.2f} s; "
               "round {} goes on from step {} of {}",
               region_, rank_, change.members.size(), change.epoch, since(t0), at.round, at.done,
               at.steps);
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
  // The data, read meanwhile at the start of the members' round (where the servers most likely
  // say the region goes on: a second or so for a dataset on 2 cores).
  const uint64_t guess = at.round;
  auto opening = std::async(std::launch::async, [this, guess] {
    open_data((guess - 1) * config_.local_steps * config_.accumulation_steps);
  });
  // The servers' values and round: the region's progress since its last exchange, and the dead
  // leader's uplink residuals, are lost (as from a snapshot); the optimizer state is the members'.
  uint64_t next = connect_leader(std::move(stop));
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
  log_->write(events::name::rejoin, {{f::region, region_},
                                     {f::rank, rank_},
                                     {f::round, at.round},
                                     {f::step, steps_taken_},
                                     {f::epoch, region_group_->epoch()},
                                     {f::seconds, since(t0)}});
  spdlog::info("worker {}-{}: leads its region again from round {}, with the state of the {} "
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
    if (open_data && (!data_ || data_->position() != got.at.micro_batches))
      this->open_data(got.at.micro_batches);
  }
  engine_->to_device(params_);
  at = got.at;
}

// The leader's round event (and the evaluation every eval_every rounds); every rank's snapshot.
void WorkerRun::end_round(uint64_t round, uint32_t steps, std::stop_token stop) {
  if (round <= last_ended_round_) return;  // ended before its group re-formed
  last_ended_round_ = round;
  ++result_.rounds;
  if (leader_) {
    nlohmann::json fields{{f::region, region_},     {f::round, round},
                          {f::steps, steps},        {f::compute_s, round_compute_},
                          {f::comm_s, round_comm_}, {f::optimizer_s, round_optimizer_},
                          {f::wait_s, round_wait_}};
    fields.update(session_->take_round_fields());
    log_->write(events::name::round, fields);
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

void WorkerRun::while_the_region_waits(const std::function<void()>& leader_work) {
  if (!comm()) {
    leader_work();
    return;
  }
  // A beat well inside the group's timeout (worker.timeout_ms).
  wait_for_leader(*comm(),
                  std::min<std::chrono::milliseconds>(std::chrono::seconds(5), config_.timeout / 4),
                  leader_work);
}

void WorkerRun::end_exchange(uint64_t next_round, std::optional<FinalModel>& final_model) {
  // Overlap and streaming: take in what is still in flight, push the fragments' last
  // progress, and give every worker the result.
  const auto t0 = Clock::now();
  const bool last = next_round > config_.rounds;  // else a stopped run: no global model
  auto reps = session_->finish(steps_taken_, params_, last ? RunEnd::flush : RunEnd::no_flush);
  if (!reps.empty()) {
    nlohmann::json j{{f::region, region_},  {f::round, reps.back().round},
                     {f::steps, 0},         {f::compute_s, 0.0},
                     {f::comm_s, 0.0},      {f::optimizer_s, 0.0},
                     {f::wait_s, since(t0)}};
    j.update(session_->take_round_fields());
    log_->write(events::name::round, j);
  }
  log_->write(events::name::tensor_motion, motion_event(region_, session_->sync().motion()));
  // One global model out of the regions' views (worker/run/final_model.hpp); not for a stopped
  // run, whose snapshots hold the residuals.
  final_model.emplace(params_, region_);
  if (last)
    final_model->flush(*session_, params_, *log_);
  else
    final_model->skip("the run stopped before its last round");
  // Training is over for this region: the servers stop counting it now rather than after
  // dead_after, so that another region's last round never waits for it.
  session_->goodbye(std::min(config_.timeout, std::chrono::milliseconds(2000)));
  if (region_index_ == 0)
    final_model->write(config_.run_dir, *model_, table_, params_, config_.model, config_.seed,
                       next_round - 1);
}

TrainResult WorkerRun::finish(uint64_t next_round) {
  engine_->to_host(params_);              // the final values, on every rank
  std::optional<FinalModel> final_model;  // the leader's
  // The leader's end of the exchange waits for the other regions' last rounds and flushes: longer
  // than the region's collective timeout when they are far behind (an uneven fleet).
  while_the_region_waits([&] {
    if (session_) end_exchange(next_round, final_model);
  });
  if (comm()) comm()->broadcast(params_, 0);
  // The last snapshot is on disk before the evaluation, whose activations are the run's largest
  // allocation (the state in flight is the parameters and optimizer state again), and before the
  // worker says it is done.
  snapshot_writer_.wait();
  log_snapshots();

  nlohmann::json done{{f::region, region_},
                      {f::rank, rank_},
                      {f::rounds, result_.rounds},
                      {f::steps, result_.steps},
                      {f::skipped_steps, result_.skipped_steps}};
  if (emulated_.on()) done[f::step_overruns] = emulated_.overruns();
  if (leader_) {
    final_model->evaluate(*data_, *backend_, params_);
    log_->write(events::name::eval, eval_event(region_, final_model->own_evaluation(),
                                               next_round - 1, result_.steps, tokens_per_step()));
    final_model->report(done, result_);
    final_model->write_own(config_.run_dir);
  }
  result_.wall_seconds = since(start_);
  done[f::wall_s] = result_.wall_seconds;
  log_->write(events::name::done, done);
  result_.params = std::move(params_);
  return std::move(result_);
}

}  // namespace

Trainer::Trainer(WorkerConfig config, std::string region, uint32_t rank, zmq::context_t& context,
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
  require_device_available(config_.device);  // device: cuda needs a CUDA + NCCL build and a GPU
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
