// server.metrics_port: its config forms, and the Prometheus text a stats snapshot renders to
// (the HTTP side is tests/python/test_metrics_endpoint.py, with prometheus_client's parser).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "server/config.hpp"
#include "server/prometheus_text.hpp"

using namespace geotrain;

namespace {
server::ServerConfig with_server(const std::string& section) {
  return server::parse_server_config(
      "regions: [us, eu]\nmodel:\n  tensors: [{name: w, size: 64}]\nserver:\n" + section);
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}
}  // namespace

TEST_CASE("server.metrics_port is a port for every server, a port per region, or auto") {
  CHECK(with_server("  heartbeat_ms: 100\n").metrics_ports.empty());
  CHECK(with_server("  metrics_port: 0\n").metrics_ports.empty());
  const auto all = with_server("  metrics_port: 9400\n");
  CHECK(all.metrics_ports == std::map<std::string, uint16_t>{{"us", 9400}, {"eu", 9400}});
  CHECK(all.metrics_host == "0.0.0.0");
  const auto each = with_server("  metrics_port: {us: 9401, eu: 0}\n  metrics_host: 127.0.0.1\n");
  CHECK(each.metrics_ports == std::map<std::string, uint16_t>{{"us", 9401}});
  CHECK(each.metrics_host == "127.0.0.1");
  CHECK(with_server("  metrics_port: auto\n").metrics_ports ==
        std::map<std::string, uint16_t>{{"us", 0}, {"eu", 0}});
  CHECK_THROWS_WITH_AS(with_server("  metrics_port: 70000\n"),
                       doctest::Contains("server.metrics_port"), InputError);
  CHECK_THROWS_WITH_AS(with_server("  metrics_port: {ap: 9400}\n"), doctest::Contains("ap"),
                       InputError);
}

TEST_CASE("a stats snapshot renders as Prometheus counters, gauges and a staleness histogram") {
  const auto stats = nlohmann::json::parse(R"({
    "server": "us", "applied_rounds": 7, "parked": 1,
    "regions": {
      "us": {"pushes": 3, "pulls": 4, "bytes_in": 1200, "bytes_out": 900, "errors": 0,
             "gate_waits": 1, "gate_wait_us": 2500000, "staleness_histogram": [1, 2, 0],
             "live": true, "registered": true},
      "eu\"x": {"pushes": 18446744073709551615, "pulls": 0, "bytes_in": 0, "bytes_out": 0,
                "errors": 2, "gate_waits": 0, "gate_wait_us": 0, "staleness_histogram": [0, 0, 0],
                "live": false, "registered": false}},
    "shards": [{"id": 0, "version": 5, "released_round": 4, "clocks": [4, 3]}],
    "connections": {"open": 3, "refused_over_cap": 12, "max_per_address": 256}})");
  wire::ProcessStats process;
  process.resident_bytes = 4096;
  const auto text = server::prometheus_text(stats, process);
  CHECK(has_line(text, "# TYPE geotrain_pushes_total counter"));
  CHECK(has_line(text, R"(geotrain_pushes_total{server="us",region="us"} 3)"));
  // uint64 counters keep every digit; label values are escaped.
  CHECK(
      has_line(text, R"(geotrain_pushes_total{server="us",region="eu\"x"} 18446744073709551615)"));
  CHECK(has_line(text, R"(geotrain_received_bytes_total{server="us",region="us"} 1200)"));
  CHECK(has_line(text, R"(geotrain_sent_bytes_total{server="us",region="us"} 900)"));
  CHECK(has_line(text, R"(geotrain_gate_wait_seconds_total{server="us",region="us"} 2.5)"));
  CHECK(has_line(text, R"(geotrain_rounds_released_total{server="us"} 7)"));
  CHECK(has_line(text, R"(geotrain_regions_live{server="us"} 1)"));
  CHECK(has_line(text, R"(geotrain_region_live{server="us",region="eu\"x"} 0)"));
  CHECK(has_line(text, R"(geotrain_shard_released_round{server="us",shard="0"} 4)"));
  // The histogram's buckets are cumulative: 1 push at tau 0, 2 at tau 1; sum 0*1 + 1*2 = 2.
  CHECK(has_line(text, "# TYPE geotrain_push_staleness histogram"));
  CHECK(has_line(text, R"(geotrain_push_staleness_bucket{server="us",region="us",le="0"} 1)"));
  CHECK(has_line(text, R"(geotrain_push_staleness_bucket{server="us",region="us",le="1"} 3)"));
  CHECK(has_line(text, R"(geotrain_push_staleness_bucket{server="us",region="us",le="2"} 3)"));
  CHECK(has_line(text, R"(geotrain_push_staleness_bucket{server="us",region="us",le="+Inf"} 3)"));
  CHECK(has_line(text, R"(geotrain_push_staleness_sum{server="us",region="us"} 2)"));
  CHECK(has_line(text, R"(geotrain_push_staleness_count{server="us",region="us"} 3)"));
  CHECK(has_line(text, R"(geotrain_connections_open{server="us"} 3)"));
  CHECK(has_line(text, R"(geotrain_connections_refused_over_cap_total{server="us"} 12)"));
  CHECK(has_line(text, "process_resident_memory_bytes 4096"));
  CHECK(text.find("process_cpu_seconds_total") == std::string::npos);  // not read: left out
  CHECK(text.find("geotrain_curve") == std::string::npos);             // no CURVE: none
}

TEST_CASE("this process's statistics are read from /proc") {
  // Some CPU time first (about 0.1 s), so that the count has something to show.
  volatile double sink = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 1000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  const auto p = wire::read_process_stats();
  rusage self{};
  REQUIRE(::getrusage(RUSAGE_SELF, &self) == 0);
  const double rusage_s = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                          1e-6 * static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec);
  REQUIRE(p.resident_bytes);
  CHECK(*p.resident_bytes > 0);
  REQUIRE(p.cpu_seconds);
  // user + system time from /proc/self/stat (clock ticks) against the kernel's getrusage.
  CHECK(*p.cpu_seconds > 0.05);
  CHECK(*p.cpu_seconds == doctest::Approx(rusage_s).epsilon(0.2));
  REQUIRE(p.open_fds);
  CHECK(*p.open_fds >= 3);
}
