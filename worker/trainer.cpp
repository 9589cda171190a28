#include "worker/trainer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.hpp"
#include "kernels/model_cpu.hpp"
#include "models/model_spec.hpp"
#include "worker/final_model.hpp"
#include "worker/leader_config.hpp"
#include "worker/local_step.hpp"
#include "worker/metrics_log.hpp"
#include "worker/model_backend.hpp"
#include "worker/region_sync.hpp"
#include "worker/sampler.hpp"  // global_rank
#include "worker/server_store.hpp"
#include "worker/streaming_sync.hpp"
#include "worker/training_data.hpp"
#include "worker/worker_checkpoint.hpp"

namespace geotrain::worker {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The exchanges merged in one round (one per round without streaming), as the round event's
// fields: bytes and seconds summed, the worst staleness and gate wait, the last round merged.
void add_reports(nlohmann::json& j, const std::vector<RoundReport>& reports) {
  double push = 0, pull = 0, gate = 0;
  uint64_t pushed = 0, pulled = 0;
  uint32_t staleness = 0;
  uint64_t largest = 0;  // the largest single exchange: what streaming divides by P
  uint64_t deferred = 0, late = 0;
  for (const auto& r : reports) {
    deferred += r.deferred.size();
    late += r.late_shards;
    largest = std::max(largest, r.bytes_pushed + r.bytes_pulled);
    push += r.push_seconds;
    pull += r.pull_seconds;
    pushed += r.bytes_pushed;
    pulled += r.bytes_pulled;
    staleness = std::max(staleness, r.max_staleness);
    gate = std::max(gate, double(r.gate_wait_us) / 1e6);
  }
  j["push_s"] = push;
  j["pull_s"] = pull;
  j["bytes_pushed"] = pushed;
  j["bytes_pulled"] = pulled;
  j["staleness"] = staleness;
  j["gate_wait_s"] = gate;
  j["merged_round"] = reports.back().round;
  j["exchanges"] = reports.size();
  j["largest_exchange_bytes"] = largest;
  // Deferred shards (worker.shard_wait_ms): still on the WAN after the round's exchanges, and
  // merged late in them.
  j["deferred_shards"] = deferred;
  j["late_shards"] = late;
}

// Rounds go through the region's float collective: exact up to 2^24.
constexpr uint64_t kMaxAgreedRound = uint64_t{1} << 24;

// --resume: the newest snapshot round that every rank of the region has (each rank's newest
// that verifies; the minimum over the ranks), and this rank's snapshot of that round. None
// when some rank has none. Snapshots that fail verification are skipped with a warning naming
// the file; the agreed round must then verify on every rank (InputError otherwise).
std::optional<WorkerCheckpointState> agree_on_snapshot(const WorkerCheckpointStore& store,
                                                       uint64_t identity, Communicator* comm,
                                                       uint32_t rank, uint32_t per_region) {
  std::vector<std::string> skipped;
  auto newest = store.restore_latest(identity, &skipped);
  for (const auto& why : skipped) spdlog::warn("snapshot skipped, not loaded: {}", why);
  const uint64_t mine = newest ? newest->round : 0;
  GT_REQUIRE(mine < kMaxAgreedRound,
             "worker snapshot of round {} in '{}': rounds beyond {} cannot "
             "be agreed on",
             mine, store.dir().string(), kMaxAgreedRound);
  uint64_t agreed = mine;
  if (comm) {
    std::vector<float> rounds(per_region, 0.0f);
    rounds[rank] = static_cast<float>(mine);
    comm->allreduce_sum(rounds);
    agreed = static_cast<uint64_t>(*std::min_element(rounds.begin(), rounds.end()));
  }
  if (agreed == 0) return std::nullopt;
  if (newest && newest->round == agreed) return newest;
  return store.load_round(agreed, identity);
}

// The leader's side of --resume, once the servers said which round the region pushes next:
// restores the uplink residuals when the snapshot is of the round just before (nothing was lost
// in between) and drops them otherwise, and returns the `resume` event's fields.
nlohmann::json resume_leader(const std::optional<WorkerCheckpointState>& snapshot, uint64_t next,
                             RegionSync& sync, ConstFloatSpan params, const std::string& region) {
  nlohmann::json j{{"region", region}, {"rank", 0}, {"round", next}};
  if (!snapshot) {
    j["checkpoint_round"] = nullptr;
    j["stale_rounds"] = next - 1;
    j["rounds_replayed"] = 0;
    j["residuals"] = "none";
    return j;
  }
  const uint64_t from = snapshot->round + 1;
  j["checkpoint_round"] = snapshot->round;
  // Rounds the servers released after the snapshot: their progress is in the servers' values,
  // the local optimizer state and residual of them are not in the snapshot.
  j["stale_rounds"] = next > from ? next - from : 0;
  // Rounds the servers lost (they restored an older checkpoint): trained again.
  j["rounds_replayed"] = next < from ? from - next : 0;
  if (next == from) {
    sync.restore_residuals(snapshot->residuals);
    j["residuals"] = "restored";
    // The snapshot's parameters are the region's global values after its round, which the
    // servers hold too: a mismatch means the servers restored another state than this region's.
    size_t differ = 0;
    const auto base = sync.base();
    for (size_t i = 0; i < params.size(); ++i) differ += params[i] != base[i];
    j["parameters_match_servers"] = differ == 0;
    if (differ > 0)
      spdlog::warn(
          "region {}: {} of {} parameters of the round-{} snapshot differ from the "
          "servers' values; training goes on from the servers'",
          region, differ, params.size(), snapshot->round);
  } else {
    j["residuals"] = "dropped";
  }
  spdlog::info(
      "region {}: resumed at round {} from the snapshot of round {} ({} stale, {} "
      "replayed)",
      region, next, snapshot->round, j["stale_rounds"].get<uint64_t>(),
      j["rounds_replayed"].get<uint64_t>());
  return j;
}

}  // namespace

std::filesystem::path worker_metrics_path(const std::filesystem::path& run_dir,
                                          const std::string& region, uint32_t rank) {
  return run_dir / fmt::format("worker-{}-{}.metrics.jsonl", region, rank);
}

Trainer::Trainer(WorkerConfig config, std::string region, uint32_t rank, zmq::context_t& context,
                 TrainerOptions options)
    : config_(std::move(config)),
      region_(std::move(region)),
      rank_(rank),
      context_(context),
      options_(options) {
  region_index_ = config_.region_index(region_);
  GT_REQUIRE(rank_ < config_.workers_per_region,
             "rank {} is not below worker.workers_per_region = {}", rank_,
             config_.workers_per_region);
  require_device_available(config_.device);  // device: cuda needs a CUDA + NCCL build and a GPU
  for (const auto& r : config_.regions)
    GT_REQUIRE(
        config_.server_endpoints.count(r) ||
            (config_.routes.count(region_) && config_.routes.at(region_).count(r)),
        "server.endpoints has no entry for region '{}' (every region's server must be reachable)",
        r);
}

TrainResult Trainer::run(std::stop_token stop) {
  const auto start = Clock::now();
  const bool leader = rank_ == 0;
  const uint32_t per_region = config_.workers_per_region;
  const uint32_t world = static_cast<uint32_t>(config_.regions.size()) * per_region;

  kernels::cpu::set_blas_threads(static_cast<int>(config_.blas_threads));
  // Model: the same initialisation in every process.
  const auto model = models::make_model(config_.model);
  const ParamTable table = model->make_table(config_.model.critical);
  std::vector<float> params(table.total_elements());
  model->init(params, config_.seed);
  // Where forward/backward run (worker.device), and the matching region connection.
  const auto backend =
      make_model_backend(config_.device, config_.model, static_cast<int>(rank_), config_.precision);
  // Device-resident training (cuda): parameters, gradient and optimizer state stay on the device;
  // `params` is a host mirror, downloaded before exchanges, evaluations and checkpoints.
  ResidentTraining* const resident = backend->resident();

  const uint64_t micro_batches = config_.total_steps() * config_.accumulation_steps;
  // Data: this worker's training stream; the held-out set for the leader. Read before anything
  // connects, so that a bad corpus or dataset fails at once; a resumed worker opens it once the
  // servers said which round it trains (below).
  std::optional<TrainingData> data_holder;
  if (!options_.resume)
    data_holder.emplace(config_, world, global_rank(region_index_, rank_, per_region), leader,
                        micro_batches);

  // Inside the region: Gloo (cpu) or NCCL (cuda), with the rendezvous at the region's own server.
  std::unique_ptr<ServerStore> store;
  std::unique_ptr<Communicator> comm;  // host spans, whatever the device
  if (per_region > 1) {
    // A restarted group (generation > 0) must not meet the dead group's keys.
    const std::string prefix =
        (config_.device == "cuda" ? "nccl/" : "gloo/") + region_ + "/" +
        (options_.generation > 0 ? fmt::format("g{}/", options_.generation) : std::string());
    wire::ChannelOptions store_options;
    store_options.curve_client = wire::curve_client(config_.security, region_, region_);
    store = std::make_unique<ServerStore>(context_, config_.server_endpoint(region_, region_),
                                          prefix, config_.timeout, store_options);
    comm = backend->connect_region(
        *store, static_cast<int>(rank_), static_cast<int>(per_region),
        RegionOptions{config_.gloo_host, config_.timeout, config_.bucket_cap_mb});
  }

  LocalStepConfig lsc;
  lsc.optimizer = config_.optimizer;
  lsc.schedule.base_lr = config_.lr;
  lsc.schedule.warmup_steps = config_.warmup_steps;
  lsc.schedule.total_steps = config_.total_steps();
  lsc.schedule.decay = config_.decay;
  lsc.schedule.min_lr = config_.min_lr;
  if (config_.scale_lr) {
    lsc.schedule.reference_batch = 64;
    lsc.schedule.global_batch = config_.batch_size * config_.accumulation_steps * world;
  }
  lsc.schedule.validate();
  lsc.accumulation_steps = config_.accumulation_steps;
  lsc.max_grad_norm = config_.max_grad_norm;
  lsc.guard = config_.guard;
  lsc.decay_mask = weight_decay_mask(table, config_.optimizer.no_decay);
  if (config_.optimizer.kind == OptimizerKind::kMuon)
    lsc.muon_matrices =
        muon_matrices(table, model->tensor_shapes(), config_.optimizer.adamw_tensors);
  LocalStep step(lsc, params.size());
  if (resident) resident->prepare_optimizer(config_.optimizer, lsc.decay_mask);

  // Snapshots of this worker's state, and the one it resumes from (--resume).
  const WorkerCheckpointStore snapshots(
      worker_checkpoint_dir(config_.run_dir, config_.checkpoint.dir, region_, rank_),
      config_.checkpoint.keep);
  const uint64_t identity = worker_identity(config_, table.layout_hash());
  std::optional<WorkerCheckpointState> resumed;
  if (options_.resume) {
    resumed = agree_on_snapshot(snapshots, identity, comm.get(), rank_, per_region);
    if (resumed) {
      GT_REQUIRE(resumed->params.size() == params.size(),
                 "worker snapshot '{}': {} parameters, the model has {}",
                 snapshots.folder(resumed->round).string(), resumed->params.size(), params.size());
      step.optimizer().restore(resumed->optimizer_m, resumed->optimizer_v,
                               resumed->optimizer_steps);
      step.guard().restore(resumed->guard_losses, resumed->guard_skipped);
      if (resident) resident->upload_optimizer_state(resumed->optimizer_m, resumed->optimizer_v);
      std::copy(resumed->params.begin(), resumed->params.end(), params.begin());
      spdlog::info("worker {}-{}: resuming from the snapshot of round {} in {}", region_, rank_,
                   resumed->round, snapshots.folder(resumed->round).string());
    } else {
      spdlog::info("worker {}-{}: --resume without a snapshot every rank has: starting fresh",
                   region_, rank_);
    }
  }

  MetricsLog log(worker_metrics_path(config_.run_dir, region_, rank_));
  log.write("start", {{"region", region_},
                      {"rank", rank_},
                      {"world", world},
                      {"model", model->kind()},
                      {"parameters", params.size()},
                      {"batch_size", config_.batch_size},
                      {"local_steps", config_.local_steps},
                      {"rounds", config_.rounds},
                      {"critical_codec", config_.critical_codec.text()},
                      {"noncritical_codec", config_.noncritical_codec.text()},
                      {"overlap", config_.overlap},
                      {"overlap_mode", std::string(overlap_mode_name(config_.overlap_mode))},
                      {"fragments", config_.fragments},
                      {"fragment_delay", config_.merge_delay()},
                      {"stream_critical", config_.stream_critical},
                      {"shard_wait_ms", config_.shard_wait.count()},
                      {"staleness_bound", config_.staleness_bound},
                      {"resume", options_.resume},
                      {"generation", options_.generation}});

  // Across regions: the leader's link to every region's server.
  std::unique_ptr<RegionSync> sync;
  std::unique_ptr<StreamingSync> streaming;
  std::vector<float> first_round{1.0f};
  if (leader) {
    // The samples one round's delta stands for (the servers' token-weighted merge).
    const uint64_t tokens_per_round = uint64_t{config_.local_steps} * config_.batch_size *
                                      config_.accumulation_steps * config_.workers_per_region;
    sync = std::make_unique<RegionSync>(
        table, leader_sync_config(config_, region_, tokens_per_round), context_);
    // The origin is the seed's initialisation, whatever a snapshot holds.
    {
      std::vector<float> origin(params.size());
      model->init(origin, config_.seed);
      sync->set_origin(origin);
    }
    const uint64_t next = sync->connect(resumed ? resumed->round + 1 : 0);
    log.write("connect", {{"region", region_},
                          {"next_round", next},
                          {"startup_bytes_pulled", sync->startup_bytes_pulled()}});
    first_round[0] = static_cast<float>(next);
    if (options_.resume) log.write("resume", resume_leader(resumed, next, *sync, params, region_));
    std::copy(sync->base().begin(), sync->base().end(), params.begin());
    streaming = std::make_unique<StreamingSync>(*sync, leader_streaming_config(config_));
  }
  if (comm) {
    comm->broadcast(first_round, 0);
    comm->broadcast(params, 0);
  }
  if (resident) resident->upload_parameters(params);
  // A resumed worker trains round t on round t's data, at round t's schedule step.
  if (options_.resume) {
    const uint64_t resume_steps = (static_cast<uint64_t>(first_round[0]) - 1) * config_.local_steps;
    step.set_steps(resume_steps);
    data_holder.emplace(config_, world, global_rank(region_index_, rank_, per_region), leader,
                        micro_batches, resume_steps * config_.accumulation_steps);
  }
  TrainingData& data = *data_holder;

  const auto delay = std::chrono::milliseconds(
      config_.step_delay_ms.count(region_) ? config_.step_delay_ms.at(region_) : 0);
  TrainResult result;
  // An evaluation as the metrics contract names it: test_* for classifiers, val_* for LMs.
  const uint64_t tokens_per_step =
      uint64_t{config_.batch_size} * config_.accumulation_steps * world * data.tokens_per_sample();
  const auto eval_fields = [&](const Evaluation& e, uint64_t at_round, uint64_t at_step) {
    // tokens: training tokens of all regions up to this step (samples for a classifier), the
    // x axis on which runs of different batch sizes and H compare.
    nlohmann::json j{{"region", region_},
                     {"round", at_round},
                     {"step", at_step},
                     {"tokens", at_step * tokens_per_step}};
    if (e.bits_per_byte) {
      j["val_loss"] = e.loss;
      j["val_bpb"] = *e.bits_per_byte;
      j["val_accuracy"] = e.accuracy;
    } else {
      j["test_accuracy"] = e.accuracy;
      j["test_loss"] = e.loss;
    }
    return j;
  };
  std::vector<float> loss_buf(1);
  uint64_t round = static_cast<uint64_t>(first_round[0]);
  // Whether the leader's exchanges change the parameters after a step: a fragment is due, or a
  // merge `delay` steps after one.
  const uint32_t merge_delay = config_.merge_delay();
  const auto changes_at = [&](uint64_t at) {
    for (uint32_t p = 0; p < config_.fragments; ++p)
      if (StreamingSync::due(at, p, config_.fragments, config_.local_steps) ||
          (merge_delay > 0 && at > merge_delay &&
           StreamingSync::due(at - merge_delay, p, config_.fragments, config_.local_steps)))
        return true;
    return false;
  };
  std::vector<RoundReport> merged;  // the exchanges merged during this round (leader)
  double round_wait = 0;
  // A stop (SIGTERM) ends every rank of the region after the same round: it reaches the ranks at
  // slightly different times, and a rank that left the loop while another began a round would
  // wait in a collective the other never joins (until the group's timeout). One float per round.
  auto stop_agreed = [&] {
    std::vector<float> flag{stop.stop_requested() ? 1.0f : 0.0f};
    if (comm) comm->allreduce_sum(flag);
    return flag[0] > 0.0f;
  };
  for (; round <= config_.rounds && !stop_agreed(); ++round) {
    double round_compute = 0, round_comm = 0;
    for (uint32_t h = 0; h < config_.local_steps; ++h) {
      double compute = 0, comm_s = 0, loss_sum = 0;
      for (uint32_t m = 0; m < config_.accumulation_steps; ++m) {
        const Batch batch = data.next();
        const auto t0 = Clock::now();
        const bool last = m + 1 == config_.accumulation_steps;
        auto r = resident ? resident->accumulate(batch, last)
                          : backend->forward_backward(params, batch, step.grad(), last);
        compute += since(t0);
        step.add_micro_batch(r.mean_loss());
        loss_sum += r.mean_loss();
      }
      if (delay.count() > 0) std::this_thread::sleep_for(delay);  // an artificially slow region
      double grad_norm_sq = 0;  // resident: of the region's summed gradient
      {
        const auto t0 = Clock::now();
        // The region's sum (AllReduce when connected).
        if (resident)
          grad_norm_sq = resident->reduce_gradient_norm_sq();
        else
          backend->reduce_gradient(step.grad());
        comm_s += since(t0);
      }
      if (comm) {
        const auto t0 = Clock::now();
        // The region's mean loss, so that every worker's anomaly guard takes the same decision.
        loss_buf[0] = static_cast<float>(loss_sum / config_.accumulation_steps);
        comm->allreduce_sum(loss_buf);
        step.set_loss(double(loss_buf[0]) / per_region);
        comm_s += since(t0);
      }
      StepReport report;
      if (resident) {
        float grad_scale = 0;
        report = step.decide(grad_norm_sq, comm ? per_region : 1, &grad_scale);
        resident->apply_step(
            {report.verdict == Verdict::kAccept, report.lr, grad_scale, step.optimizer().steps()});
      } else {
        report = step.apply(params, comm ? per_region : 1);
      }
      ++result.steps;
      if (report.verdict != Verdict::kAccept) ++result.skipped_steps;
      round_compute += compute;
      round_comm += comm_s;
      log.write("step", {{"region", region_},
                         {"rank", rank_},
                         {"round", round},
                         {"step", report.step},
                         {"loss", report.loss},
                         {"lr", report.lr},
                         {"grad_norm", report.grad_norm},
                         {"compute_s", compute},
                         {"comm_s", comm_s},
                         {"skipped", report.verdict != Verdict::kAccept}});
      // The exchanges due after this step (every fragment's push, and the merges `delay` steps
      // later); every rank knows the schedule, so all take part in the broadcast that follows.
      const uint64_t global_step = (round - 1) * config_.local_steps + h + 1;
      const bool exchanged = changes_at(global_step);
      if (resident && leader && exchanged) resident->download_parameters(params);
      if (leader) {
        const auto t0 = Clock::now();
        for (auto& rep : streaming->after_step(global_step, params)) merged.push_back(rep);
        round_wait += since(t0);
      }
      if (comm && exchanged) comm->broadcast(params, 0);
      if (resident && exchanged) resident->upload_parameters(params);
    }

    // The round boundary.
    nlohmann::json round_fields;
    if (leader) {
      round_fields = {
          {"region", region_},          {"round", round},       {"steps", config_.local_steps},
          {"compute_s", round_compute}, {"comm_s", round_comm}, {"wait_s", round_wait}};
      if (!merged.empty()) add_reports(round_fields, merged);
      merged.clear();
      round_wait = 0;
    }
    if (leader) {
      log.write("round", round_fields);
      if (config_.eval_every > 0 && round % config_.eval_every == 0 && round < config_.rounds) {
        if (resident) resident->download_parameters(params);
        log.write("eval", eval_fields(data.evaluate(*backend, params), round, result.steps));
      }
    }
    // worker.checkpoint: every N rounds, at the last round and when stopped, so that --resume
    // continues where this worker stops.
    if (config_.checkpoint.every > 0 && (round % config_.checkpoint.every == 0 ||
                                         round == config_.rounds || stop.stop_requested())) {
      if (resident) {
        resident->download_parameters(params);
        std::vector<float> m(step.optimizer().first_moment().size()),
            v(step.optimizer().second_moment().size());
        resident->download_optimizer_state(m, v);
        step.optimizer().restore(m, v, step.optimizer().steps());
      }
      WorkerCheckpointState s;
      s.region = region_;
      s.rank = rank_;
      s.round = round;
      s.steps = step.steps();
      s.micro_batches = data.position();
      s.seed = config_.seed;
      s.identity = identity;
      s.params = params;
      const auto m = step.optimizer().first_moment();
      const auto v = step.optimizer().second_moment();
      s.optimizer_m.assign(m.begin(), m.end());
      s.optimizer_v.assign(v.begin(), v.end());
      s.optimizer_steps = step.optimizer().steps();
      s.guard_losses = step.guard().losses();
      s.guard_skipped = step.guard().skipped();
      // A background exchange owns the RegionSync now: its residuals are not read (with
      // overlap, a snapshot holds none, docs/run.md).
      if (leader && !streaming->background()) s.residuals = streaming->residuals();
      const auto folder = snapshots.write(s);
      log.write(
          "checkpoint",
          {{"region", region_}, {"rank", rank_}, {"round", round}, {"path", folder.string()}});
    }
    ++result.rounds;
  }

  // Overlap and streaming: take in what is still in flight, push the fragments' last progress,
  // and give every worker the result.
  if (resident) resident->download_parameters(params);  // the final values, on every rank
  std::optional<FinalModel> final_model;                // the leader's
  if (streaming) {
    const auto t0 = Clock::now();
    const uint64_t last_step = (round - 1) * config_.local_steps;
    auto reps = streaming->finish(last_step, params);
    if (!reps.empty()) {
      nlohmann::json j{{"region", region_}, {"round", reps.back().round},
                       {"steps", 0},        {"compute_s", 0.0},
                       {"comm_s", 0.0},     {"wait_s", since(t0)}};
      add_reports(j, reps);
      log.write("round", j);
    }
    streaming.reset();
    // One global model out of the regions' views (worker/final_model.hpp); not for a stopped
    // run, whose snapshots hold the residuals.
    final_model.emplace(params, region_);
    if (round > config_.rounds)
      final_model->flush(*sync, params, log);
    else
      final_model->skip("the run stopped before its last round");
    // Training is over for this region: the servers stop counting it now rather than after
    // dead_after, so that another region's last round never waits for it.
    sync->goodbye(std::min(config_.timeout, std::chrono::milliseconds(2000)));
    if (region_index_ == 0)
      final_model->write(config_.run_dir, *model, table, params, config_.model, config_.seed,
                         round - 1);
  }
  if (comm) comm->broadcast(params, 0);

  nlohmann::json done{{"region", region_},
                      {"rank", rank_},
                      {"rounds", result.rounds},
                      {"steps", result.steps},
                      {"skipped_steps", result.skipped_steps}};
  if (leader) {
    final_model->evaluate(data, *backend, params);
    log.write("eval", eval_fields(final_model->own_evaluation(), round - 1, result.steps));
    final_model->report(done, result);
    // The region's own final parameters, raw little-endian fp32 in the table's layout.
    const auto own = final_model->own_parameters();
    const auto file = config_.run_dir / fmt::format("params-{}.f32", region_);
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(own.data()),
              std::streamsize(own.size() * sizeof(float)));
    GT_REQUIRE(out.good(), "cannot write the final parameters to '{}'", file.string());
  }
  result.wall_seconds = since(start);
  done["wall_s"] = result.wall_seconds;
  log.write("done", done);
  result.params = std::move(params);
  return result;
}

}  // namespace geotrain::worker
