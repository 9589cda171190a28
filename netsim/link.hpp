// What one emulated WAN link is: plain config structs, no behaviour.
//
// A directed link "A->B" is a TCP listener (`listen`) that forwards every accepted connection to
// `target`. Bytes from the connecting client towards the target travel the link's forward lane,
// replies travel its reverse lane; both lanes use the same LinkProperties (a full-duplex path)
// but each has its own token bucket. Times in faults are seconds from WanProxy::start().
// Plain values: copy freely, no thread-safety concerns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::netsim {

enum class JitterDistribution { uniform, normal };

struct LinkProperties {
  double delay_ms = 0;   // one-way propagation delay, applied in each direction
  double jitter_ms = 0;  // uniform: +-jitter_ms; normal: standard deviation (clamped at 3x)
  JitterDistribution jitter_distribution = JitterDistribution::uniform;
  double bandwidth_mbps = 0;  // per lane, shared by all connections of the link; 0 = unlimited
  double burst_kib = 0;       // token-bucket depth; 0 = default (see effective_burst_bytes)
  double window_kib = 0;      // per-connection bytes in flight (read .. acked); 0 = no limit
};

// A link's bandwidth in bytes per second (bandwidth_mbps is in megabits).
inline double bytes_per_s(const LinkProperties& p) { return p.bandwidth_mbps * 1e6 / 8; }

// Token-bucket depth actually used: burst_kib when set, else 5 ms worth of bandwidth, at least
// 16 KiB. Only meaningful when bandwidth_mbps > 0.
double effective_burst_bytes(const LinkProperties& p);

enum class FaultKind {
  partition,  // nothing is delivered during [at, until); then delivery resumes, nothing lost
  reset,      // at `at`, every open connection of the link is cut (RST to both ends)
  set,        // at `at`, change the properties given (bandwidth, delay, jitter, window)
  blackhole,  // during [at, until): connections are accepted, nothing arrives; at `until` the
              // connections that were blackholed are reset (their streams lost bytes)
};

struct Fault {
  FaultKind kind = FaultKind::partition;
  double at_s = 0;
  std::optional<double> until_s;  // partition: required; blackhole: optional (forever)
  std::optional<double> delay_ms, jitter_ms, bandwidth_mbps, window_kib;  // kind == set
};

struct Endpoint {
  std::string host = "127.0.0.1";  // numeric IPv4 address
  uint16_t port = 0;               // listen: 0 = ephemeral (see WanProxy::listen_port)
};

struct LinkConfig {
  std::string from, to;  // region names; the link's name is "from->to"
  Endpoint listen;
  Endpoint target;
  LinkProperties properties;
  std::vector<Fault> faults;
  // Tests and debugging: every byte the link forwards, both directions, appended to this file
  // as it is read (the zero-copy splice path is off for such a link). Empty: no capture.
  std::filesystem::path capture_file{};

  std::string name() const { return from + "->" + to; }
};

// Checks a link's properties and faults; throws InputError naming the link, field and value.
void validate(const LinkConfig& link);

const char* to_string(FaultKind kind);
const char* to_string(JitterDistribution d);

}  // namespace geotrain::netsim
