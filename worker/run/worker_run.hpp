// WorkerRun: one run of a worker process, internal to worker/run/ (Trainer::run is its only
// user). Its parts live by responsibility: trainer.cpp sets up and runs the rounds,
// worker_run_region.cpp keeps the region's group whole when a worker dies or comes back (regroup,
// the state from a live peer, a leader started again), worker_run_end.cpp ends the run (what is in
// flight, the global model, `done`). Not thread-safe: the worker's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "models/model.hpp"
#include "wire/context.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/backend/step_engine.hpp"
#include "worker/config.hpp"
#include "worker/data/training_data.hpp"
#include "worker/leader/fragment_schedule.hpp"
#include "worker/leader/leader_session.hpp"
#include "worker/run/final_model.hpp"
#include "worker/run/metrics_log.hpp"
#include "worker/run/region_collective.hpp"
#include "worker/run/region_resync.hpp"
#include "worker/run/snapshot_writer.hpp"
#include "worker/run/trainer.hpp"
#include "worker/run/worker_checkpoint.hpp"
#include "worker/run/worker_metrics.hpp"
#include "worker/training/emulated_step.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/round_budget.hpp"

namespace geotrain::worker {

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
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // `stop` ends the rendezvous with the region's other ranks (ServerStore).
  WorkerRun(const WorkerConfig& config, const std::string& region, uint32_t region_index,
            uint32_t rank, wire::Context& context, TrainerOptions options, std::stop_token stop);
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
  // start() for a restarted worker (--rejoin): admitted to its region's live group, it takes the
  // leader's state and place (a leader: lead_again()); training over: the round past the last.
  RegionPosition rejoin(std::stop_token stop);
  // The `rejoin` event: back in the group at `at`, `t0` when it began.
  void log_rejoin(const RegionPosition& at, Clock::time_point t0);
  void restore_snapshot();
  // `resume_at`: the round the region trains next by its own count (0: the servers' first).
  uint64_t connect_leader(std::stop_token stop, uint64_t resume_at,
                          ResumeRound how = ResumeRound::at_least);
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
  wire::Context& context_;
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

}  // namespace geotrain::worker
