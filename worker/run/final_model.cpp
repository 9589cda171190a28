#include "worker/run/final_model.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/metrics_events.hpp"
#include "models/model_file.hpp"
#include "worker/leader/reply_wait.hpp"
#include "worker/run/worker_events.hpp"

namespace geotrain::worker {

namespace f = events::field;

namespace {
std::string figure_text(const Evaluation& e) {
  return e.bits_per_byte
             ? fmt::format("validation loss {:.4f}, {:.4f} bits per byte", e.loss, *e.bits_per_byte)
             : fmt::format("test accuracy {:.2f}%", 100 * e.accuracy);
}
}  // namespace

std::filesystem::path global_model_path(const std::filesystem::path& run_dir) {
  return run_dir / "model.safetensors";
}

FinalModel::FinalModel(ExchangeEnd end, std::string region)
    : own_(std::move(end.own)),
      region_(std::move(region)),
      global_(end.flush.global()),
      error_(std::move(end.flush.error)) {}

FlushOutcome flush_to_global(LeaderSession& session, FloatSpan params, ConstFloatSpan own,
                             const std::string& region) {
  GT_ASSERT(own.size() == params.size(), "own {} != params {}", own.size(), params.size());
  const auto t0 = std::chrono::steady_clock::now();
  FlushOutcome out{{{f::region, region}}, {}};
  try {
    const auto r = session.flush(params);
    const auto base = session.sync().base();
    std::copy(base.begin(), base.end(), params.begin());
    out.event.update(flush_fields(r));
  } catch (const Stopped&) {
    throw;  // the worker is stopping: no global model, and no more waiting for one
  } catch (const std::exception& e) {
    // The parameters are the region's own again (a failed pull may have changed base, never
    // params); the bytes that went out before the failure are not counted.
    std::copy(own.begin(), own.end(), params.begin());
    out.error = e.what();
    spdlog::warn("region {}: no global model: {}", region, out.error);
    out.event[f::error] = out.error;
  }
  out.event[f::global_model] = out.global();
  out.event[f::seconds] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

ExchangeEnd end_exchange(LeaderSession& session, uint64_t last_step, FloatSpan params, bool last,
                         const std::string& region, std::chrono::milliseconds goodbye_wait,
                         const EventSink& write, std::optional<uint64_t> unlogged_round) {
  const auto t0 = std::chrono::steady_clock::now();
  ExchangeEnd end;
  end.reports = session.finish(last_step, params, last ? RunEnd::flush : RunEnd::no_flush);
  if (!end.reports.empty()) unlogged_round = end.reports.back().round;
  if (unlogged_round) {
    const double wait_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write(events::name::round,
          round_event(region, *unlogged_round, 0, {.wait_s = wait_s}, session.take_round_fields()));
  }
  write(events::name::tensor_motion, motion_event(region, session.sync().motion()));
  end.own.assign(params.begin(), params.end());
  if (last) {
    end.flush = flush_to_global(session, params, end.own, region);
    write(events::name::flush, end.flush.event);
  } else {
    end.flush.error = "the run stopped before its last round";
  }
  session.goodbye(goodbye_wait);
  return end;
}

std::filesystem::path write_global_model(const std::filesystem::path& run_dir, uint64_t rounds,
                                         const ModelFileWriter& write_file) {
  const auto file = global_model_path(run_dir);
  auto part = file;
  part += ".part";
  try {
    std::filesystem::create_directories(run_dir);
    write_file(part, {{"weights", "global model"}, {"rounds", std::to_string(rounds)}});
    std::filesystem::rename(part, file);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(part, ignored);
    throw;
  }
  return file;
}

void write_region_params(const std::filesystem::path& run_dir, const std::string& region,
                         ConstFloatSpan params) {
  const auto file = run_dir / fmt::format("params-{}.f32", region);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(params.data()),
            std::streamsize(params.size() * sizeof(float)));
  GT_REQUIRE(out.good(), "cannot write the final parameters to '{}'", file.string());
}

std::optional<std::filesystem::path> FinalModel::write(
    const std::filesystem::path& run_dir, const models::Model& model, const ParamTable& table,
    ConstFloatSpan params, const models::ModelSpec& spec, uint64_t seed, uint64_t rounds) {
  if (!global_) return std::nullopt;
  try {
    const auto file = write_global_model(
        run_dir, rounds,
        [&](const std::filesystem::path& part, const std::map<std::string, std::string>& meta) {
          models::write_model_file(part, model, table, params, spec, seed, meta);
        });
    spdlog::info("region {}: wrote the global model to {}", region_, file.string());
    return file;
  } catch (const std::exception& e) {
    spdlog::warn("region {}: the global model could not be written to {}: {}", region_,
                 global_model_path(run_dir).string(), e.what());
    return std::nullopt;
  }
}

void FinalModel::evaluate(const TrainingData& data, ModelBackend& backend, ConstFloatSpan params) {
  own_eval_ = data.evaluate(backend, own_);
  if (!global_) return;
  const bool same = params.size() == own_.size() &&
                    std::memcmp(params.data(), own_.data(), own_.size() * sizeof(float)) == 0;
  global_eval_ = same ? *own_eval_ : data.evaluate(backend, params);
}

void FinalModel::report(nlohmann::json& done, TrainResult& result) const {
  GT_ASSERT(own_eval_.has_value(), "report() before evaluate()");
  done.update(end_figures(figures_of(*own_eval_),
                          global_eval_ ? std::optional(figures_of(*global_eval_)) : std::nullopt,
                          error_));
  const Evaluation& final_eval = global_eval_ ? *global_eval_ : *own_eval_;
  result.global_model = global_;
  if (final_eval.bits_per_byte) {
    result.final_val_bpb = final_eval.bits_per_byte;
    result.final_val_loss = final_eval.loss;
    result.region_val_bpb = own_eval_->bits_per_byte;
    result.region_val_loss = own_eval_->loss;
  } else {
    result.final_test_accuracy = final_eval.accuracy;
    result.region_test_accuracy = own_eval_->accuracy;
  }
  if (global_eval_)
    spdlog::info("region {}: {} rounds, {} steps; global model: {}; this region's parameters: {}",
                 region_, result.rounds, result.steps, figure_text(*global_eval_),
                 figure_text(*own_eval_));
  else
    spdlog::info("region {}: {} rounds, {} steps, {} (no global model: {})", region_, result.rounds,
                 result.steps, figure_text(*own_eval_), error_);
}

void FinalModel::write_own(const std::filesystem::path& run_dir) const {
  write_region_params(run_dir, region_, own_);
}

}  // namespace geotrain::worker
