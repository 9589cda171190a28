// FinalModel: the end of a run, seen from a region's leader (docs/training.md, "The end of a
// run"). Until then each region holds its own view of the parameters: what it trained, merged
// with what the servers sent back through a lossy downlink, while error feedback still holds
// part of its deltas (uplink) and of the servers' changes (downlink).
//   1. end_exchange() (below: the native trainer and the Python API) drains the exchange and
//      flushes: pushes the progress the region did not push yet (not its residuals) and pulls
//      the global values in full fp32 (LeaderSession::flush), once every live region has flushed:
//      the global model, the mean of what the regions hold, the same in every region that flushed;
//      logs the `flush` event (its bytes count in the run's WAN bytes);
//      FinalModel then keeps the region's own final parameters and the flush's outcome;
//   2. write(): the first region's leader writes it as <run_dir>/model.safetensors, in the
//      layout `geotrain export-init` writes (models/model_file.hpp);
//   3. evaluate() and report(): every leader evaluates both (the global model once, when it is
//      the region's own parameters bit for bit) and fills the `done` event: region_* of the
//      region's own parameters, final_* of the global model, global_model (whether there is
//      one) and global_model_error (why not).
// A run stopped before its last round skips the flush (its snapshots hold the residuals, which a
// resumed run pushes with its later rounds).
//
// Never throws for what the servers do: a flush that fails leaves the parameters as they were,
// and the region reports its own figures. Blocks on the network and on the evaluation. Owns a
// copy of the region's parameters. Not thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "worker/data/training_data.hpp"
#include "worker/leader/leader_session.hpp"
#include "worker/run/train_result.hpp"

namespace geotrain::worker {

// The run folder's file of the global model.
std::filesystem::path global_model_path(const std::filesystem::path& run_dir);

// Writes a safetensors file to `path` with `metadata` (the native model's writer, or the Python
// API's named tensors).
using ModelFileWriter = std::function<void(const std::filesystem::path& path,
                                           const std::map<std::string, std::string>& metadata)>;
// The global model's file, the native leaders' (FinalModel::write) and the Python API's: written
// by `write_file` to a temporary file with {"weights": "global model", "rounds": N} and renamed
// into place (a reader never sees half a model). Returns the path; throws what write_file throws,
// the temporary file removed.
std::filesystem::path write_global_model(const std::filesystem::path& run_dir, uint64_t rounds,
                                         const ModelFileWriter& write_file);

// The region's own final parameters, raw little-endian fp32 in the table's layout:
// <run_dir>/params-<region>.f32. InputError when it cannot be written.
void write_region_params(const std::filesystem::path& run_dir, const std::string& region,
                         ConstFloatSpan params);

// A flush's outcome: its `flush` event, and why there is no global model (empty: there is one).
struct FlushOutcome {
  nlohmann::json event;
  std::string error;
  bool global() const { return error.empty(); }
};
// The flush of region `region`'s leader (LeaderSession::flush): `params` become the global model,
// or, when the flush fails, stay `own` (the region's own parameters) with the reason in the
// outcome. Rethrows Stopped (the worker is stopping). The native leaders (FinalModel::flush) and
// the Python API call it.
FlushOutcome flush_to_global(LeaderSession& session, FloatSpan params, ConstFloatSpan own,
                             const std::string& region);

// Writes one event: the worker's MetricsLog, or the Python API's log.
using EventSink = std::function<void(const std::string& name, nlohmann::json fields)>;

// What a leader's end of the exchange leaves (end_exchange).
struct ExchangeEnd {
  std::vector<RoundReport> reports;  // the exchanges that drained
  std::vector<float> own;            // the region's own final parameters, before the flush
  FlushOutcome flush;                // its error says why there is no global model
};

// The end of a region leader's exchange, the native trainer's and the Python API's alike:
// LeaderSession::finish (what is in flight merged into `params`; with `last`, the fragments' last
// progress pushed), the `round` event of the exchanges that drained (0 steps, its wait since the
// call; also when the caller merged exchanges it has not logged, the last at `unlogged_round`),
// the `tensor_motion` event, then with `last` the flush (flush_to_global; the `flush` event) and
// without it no global model ("the run stopped before its last round": a stopped run's snapshots
// hold the residuals), and the goodbye (at most `goodbye_wait` per server) so that the servers
// stop counting the region. Rethrows Stopped.
ExchangeEnd end_exchange(LeaderSession& session, uint64_t last_step, FloatSpan params, bool last,
                         const std::string& region, std::chrono::milliseconds goodbye_wait,
                         const EventSink& write,
                         std::optional<uint64_t> unlogged_round = std::nullopt);

class FinalModel {
 public:
  // From the end of the region's exchange (end_exchange): the region's own final parameters and
  // whether the flush gave a global model. `region` names it in events and logs.
  FinalModel(ExchangeEnd end, std::string region);

  bool global() const { return global_; }

  // After flush(), with the global model in `params`: writes it to global_model_path(run_dir),
  // through a temporary file renamed into place, with the run's rounds in the metadata. Returns
  // the path; none without a global model, or when writing failed (logged).
  std::optional<std::filesystem::path> write(const std::filesystem::path& run_dir,
                                             const models::Model& model, const ParamTable& table,
                                             ConstFloatSpan params, const models::ModelSpec& spec,
                                             uint64_t seed, uint64_t rounds);

  // Evaluates the region's own parameters and, when there is one, the global model (`params`).
  void evaluate(const TrainingData& data, ModelBackend& backend, ConstFloatSpan params);
  const Evaluation& own_evaluation() const { return *own_eval_; }
  // The region's own final parameters to <run_dir>/params-<region>.f32 (write_region_params).
  void write_own(const std::filesystem::path& run_dir) const;

  // After evaluate(): the `done` event's fields and the result's figures (final_* are the global
  // model's, or the region's own without one), and the log line.
  void report(nlohmann::json& done, TrainResult& result) const;

 private:
  std::vector<float> own_;
  std::string region_;
  bool global_ = false;
  std::string error_;
  std::optional<Evaluation> own_eval_, global_eval_;
};

}  // namespace geotrain::worker
