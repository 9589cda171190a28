#include <spdlog/spdlog.h>

#include "core/metrics_events.hpp"
#include "worker/region/leader_wait.hpp"
#include "worker/run/worker_events.hpp"
#include "worker/run/worker_run.hpp"

namespace geotrain::worker {

namespace f = events::field;

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
  // What is in flight, the flush to one global model (not for a stopped run: next_round is not
  // past the last) and the goodbye, so that the servers stop counting this region now rather
  // than after dead_after (worker/run/final_model.hpp).
  const bool last = next_round > config_.rounds;
  final_model.emplace(
      worker::end_exchange(*session_, steps_taken_, params_, last, region_,
                           std::min(config_.timeout, std::chrono::milliseconds(2000)),
                           [this](const std::string& name, nlohmann::json fields) {
                             log_->write(name, std::move(fields));
                           }),
      region_);
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

  nlohmann::json done = nlohmann::json::object();
  if (emulated_.on()) done[f::step_overruns] = emulated_.overruns();
  if (leader_) {
    final_model->evaluate(*data_, *backend_, params_);
    log_->write(events::name::eval, eval_event(region_, final_model->own_evaluation(),
                                               next_round - 1, result_.steps, tokens_per_step()));
    final_model->report(done, result_);
    final_model->write_own(config_.run_dir);
  }
  result_.wall_seconds = since(start_);
  done.update(done_event(region_, rank_, result_.rounds, result_.steps, result_.skipped_steps,
                         result_.wall_seconds));
  log_->write(events::name::done, done);
  result_.params = std::move(params_);
  return std::move(result_);
}

}  // namespace geotrain::worker
