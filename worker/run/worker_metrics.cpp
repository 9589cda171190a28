#include "worker/run/worker_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/metrics_events.hpp"
#include "core/version.hpp"
#include "wire/prometheus.hpp"

namespace geotrain::worker {

namespace f = events::field;

namespace {
std::optional<double> number(const nlohmann::json& e, const char* key) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
}  // namespace

WorkerMetrics::WorkerMetrics(std::string region, uint32_t rank, uint64_t units_per_step,
                             std::string unit)
    : region_(std::move(region)),
      rank_(rank),
      units_per_step_(units_per_step),
      unit_(std::move(unit)) {}

void WorkerMetrics::add(const nlohmann::json& e) {
  const auto kind = e.value(f::event, std::string());
  std::lock_guard lock(mutex_);
  if (kind == events::name::start) {
    model_ = e.value(f::model, std::string());
    device_ = e.value(f::device, std::string());
  } else if (kind == events::name::step) {
    ++steps_;
    if (e.value(f::skipped, false)) ++skipped_;
    compute_s_ += number(e, f::compute_s).value_or(0);
    comm_s_ += number(e, f::comm_s).value_or(0);
    optimizer_s_ += number(e, f::optimizer_s).value_or(0);
    if (auto l = number(e, f::loss)) loss_ = l;
  } else if (kind == events::name::round) {
    if (number(e, f::steps).value_or(1) > 0) ++rounds_;  // the overlap's drain is no round
    pushed_ += number(e, f::bytes_pushed).value_or(0);
    pulled_ += number(e, f::bytes_pulled).value_or(0);
    wait_s_ += number(e, f::wait_s).value_or(0);
    if (auto s = number(e, f::staleness)) staleness_ = s;
  } else if (kind == events::name::flush) {
    pushed_ += number(e, f::bytes_pushed).value_or(0);
    pulled_ += number(e, f::bytes_pulled).value_or(0);
  } else if (kind == events::name::eval) {
    if (auto a = number(e, f::test_accuracy)) test_accuracy_ = a;
    if (auto b = number(e, f::val_bpb)) val_bpb_ = b;
    if (auto l = number(e, f::val_loss)) val_loss_ = l;
  }
}

std::string WorkerMetrics::render() const {
  using wire::prometheus_number;
  wire::Exposition out;
  const wire::PrometheusLabels who{{"region", region_}, {"rank", std::to_string(rank_)}};
  const auto process = wire::read_process_stats();  // /proc, outside the lock add() takes
  std::lock_guard lock(mutex_);
  auto labels = who;
  labels.emplace_back("model", model_);
  labels.emplace_back("device", device_);
  labels.emplace_back("version", kVersion);
  out.single("geotrain_worker_info", "gauge", "Always 1; labels name the worker and its model.",
             labels, "1");
  const auto counter = [&](const char* name, const char* help, double v) {
    out.single(name, "counter", help, who, prometheus_number(v));
  };
  const auto gauge = [&](const char* name, const char* help, std::optional<double> v) {
    if (v) out.single(name, "gauge", help, who, prometheus_number(*v));
  };
  counter("geotrain_worker_steps_total", "Optimizer steps taken.", double(steps_));
  counter("geotrain_worker_skipped_steps_total", "Steps the anomaly guard refused.",
          double(skipped_));
  counter(unit_ == "tokens" ? "geotrain_worker_tokens_total" : "geotrain_worker_samples_total",
          unit_ == "tokens" ? "Tokens this worker trained on." : "Samples this worker trained on.",
          double(steps_ * units_per_step_));
  counter("geotrain_worker_compute_seconds_total", "Forward and backward time.", compute_s_);
  counter("geotrain_worker_allreduce_seconds_total",
          "Time in the region's AllReduce and loss reduction.", comm_s_);
  counter("geotrain_worker_optimizer_seconds_total",
          "Time in the optimizer's step (on a GPU: queuing its kernels).", optimizer_s_);
  const double alive =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  gauge("geotrain_worker_compute_utilization",
        "Forward and backward time over the time since the worker started.",
        alive > 0 ? std::optional<double>(std::min(1.0, compute_s_ / alive)) : std::nullopt);
  gauge("geotrain_worker_loss", "The newest step's training loss.", loss_);
  if (rank_ == 0) {
    counter("geotrain_worker_rounds_total", "Rounds trained (the leader).", double(rounds_));
    counter("geotrain_worker_wan_pushed_bytes_total",
            "Payload bytes the leader pushed to all servers (compressed).", pushed_);
    counter("geotrain_worker_wan_pulled_bytes_total",
            "Payload bytes the leader pulled from all servers (compressed).", pulled_);
    counter("geotrain_worker_wan_wait_seconds_total",
            "Time the leader's training waited for the WAN exchange.", wait_s_);
    gauge("geotrain_worker_staleness", "The newest round's staleness.", staleness_);
    gauge("geotrain_worker_test_accuracy", "The newest evaluation's test accuracy (0..1).",
          test_accuracy_);
    gauge("geotrain_worker_val_bpb", "The newest evaluation's validation bits per byte.", val_bpb_);
    gauge("geotrain_worker_val_loss", "The newest evaluation's validation loss (nats per byte).",
          val_loss_);
  }
  wire::add_process_metrics(out, process);
  return out.take();
}

MetricsExporter::MetricsExporter(wire::Context& context, const std::string& host, uint16_t port,
                                 std::function<std::string()> render)
    : endpoint_(context, host, port), render_(std::move(render)) {
  thread_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      endpoint_.serve(render_);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

MetricsExporter::~MetricsExporter() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace geotrain::worker
