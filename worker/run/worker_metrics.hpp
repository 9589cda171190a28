// What a worker serves at `/metrics` in the Prometheus format (worker.metrics_port,
// docs/monitoring.md): its training as counters and gauges, kept from the same events it writes
// to its metrics JSONL (MetricsLog's observer), so that the two never disagree.
//
// Every geotrain_worker_ series carries `region` and `rank`. All ranks: steps, skipped steps,
// the newest loss, compute and AllReduce seconds, compute utilization, and the tokens (a GPT) or
// samples (a classifier) trained. The leader (rank 0) also: rounds, WAN payload bytes pushed and
// pulled, seconds waiting on the WAN, the newest staleness, and the newest evaluation
// (test accuracy, or validation bpb and loss). Plus the standard process_* metrics.
//
// WorkerMetrics is thread-safe (the training thread adds, the exporter's thread renders).
// MetricsExporter serves it on a thread of its own.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "wire/context.hpp"
#include "wire/metrics_endpoint.hpp"

namespace geotrain::worker {

class WorkerMetrics {
 public:
  // `units_per_step`: what one of this worker's optimizer steps trains, in `unit` ("tokens" or
  // "samples").
  WorkerMetrics(std::string region, uint32_t rank, uint64_t units_per_step, std::string unit);

  void add(const nlohmann::json& event);
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  const std::string region_;
  const uint32_t rank_;
  const uint64_t units_per_step_;
  const std::string unit_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string model_, device_;
  uint64_t steps_ = 0, skipped_ = 0, rounds_ = 0;
  double compute_s_ = 0, comm_s_ = 0, optimizer_s_ = 0, wait_s_ = 0, pushed_ = 0, pulled_ = 0;
  std::optional<double> loss_, staleness_, test_accuracy_, val_bpb_, val_loss_;
};

// Serves `render` at http://host:port/metrics (port 0: any free one) from its own thread, which
// polls the endpoint every 50 ms until the exporter is destroyed. SystemError when the port
// cannot be bound.
class MetricsExporter {
 public:
  MetricsExporter(wire::Context& context, const std::string& host, uint16_t port,
                  std::function<std::string()> render);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  std::string url() const { return endpoint_.url(); }

 private:
  wire::MetricsEndpoint endpoint_;  // bound here, then used by thread_ alone
  std::function<std::string()> render_;
  std::jthread thread_;
};

}  // namespace geotrain::worker
