// The pure half of `geotrain chaos` (docs/chaos.md): which processes it may kill, the seeded
// fault schedule, duration arguments, the progress timeline goodput is measured on, and the
// config overrides that turn a user's config into the chaos and reference runs. Plain values and
// pure functions (apart from reading a run folder's files); no threads, no processes.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_overrides.hpp"

namespace geotrain::launcher {

// The kinds of process `geotrain run` brings back under run.restart (launcher.cpp): the chaos
// harness kills only these. A leader is worker rank 0, a worker any other rank (launcher.cpp
// restarts the region's whole worker group for either, from the workers' checkpoints).
inline constexpr std::array<std::string_view, 4> kRestartableKinds = {"server", "netsim", "leader",
                                                                      "worker"};
bool launcher_restarts(std::string_view kind);

// The kind of a run's process from its name in events.jsonl: "server-eu-west" -> server,
// "netsim" -> netsim, "worker-eu-west-0" -> leader, "worker-eu-west-1" -> worker; "" otherwise.
std::string process_kind(const std::string& process);

// "20s", "10m", "1.5h", "250ms", or a plain number of seconds. InputError naming `what` (the
// option) and the value otherwise, or when it is not positive.
double parse_duration(const std::string& text, const std::string& what);

enum class ChaosFault { kill, stop, partition };
const char* to_string(ChaosFault f);

// Relative weights of the three faults (`--mix kill:stop:partition`, e.g. 2:1:1).
struct FaultMix {
  double kill = 2, stop = 1, partition = 1;
};
FaultMix parse_fault_mix(const std::string& text);  // "2:1:1"; InputError otherwise

struct ScheduleInputs {
  uint64_t seed = 1;
  double every_s = 20;     // mean time between two faults (uniform in [0.5, 1.5] x this)
  double first_at_s = 20;  // the first fault, from the run's start
  double horizon_s = 600;  // no fault at or after this
  FaultMix mix;
  double stop_s = 10;                // SIGSTOP length
  double partition_s = 10;           // partition length
  std::vector<std::string> regions;  // partitions need two or more (and netsim)
  bool partitions_possible = true;   // false: no netsim (one region, or no WAN profile)
};

struct PlannedFault {
  double at_s = 0;  // from the chaos run's start (netsim's fault clock origin)
  ChaosFault fault = ChaosFault::kill;
  double length_s = 0;   // stop and partition
  std::string from, to;  // partition: the directed link
  uint64_t pick = 0;     // kill and stop: which of the candidates, modulo their number
};

// The seeded schedule: same inputs, same faults. Partitions never overlap each other.
std::vector<PlannedFault> plan_faults(const ScheduleInputs& in);

// One region's leader finishing a round, as the harness saw it (seconds since its clock's zero).
struct ProgressPoint {
  double t = 0;
  uint64_t rounds = 0;  // the fewest rounds any region has trained by then (TrainedRounds)
};

// The rounds each region has trained, from its leader's `round` events (those with steps): a
// round counts once, when the region first finishes it. Rounds redone after a restore from a
// snapshot do not count again, and rounds a region jumped over do not count at all (a region
// that went on from its servers' count after a restart: the others trained them without it).
// Goodput is measured on the fewest, the slowest region's useful rounds: a region stalled while
// the others went on makes it fall, not rise.
class TrainedRounds {
 public:
  explicit TrainedRounds(std::vector<std::string> regions) : regions_(std::move(regions)) {}
  // Region `region` finished round `round`; true when it counts (a round newer than any before).
  bool finished(const std::string& region, uint64_t round);
  // The fewest any region has trained (0 while one has trained none).
  uint64_t fewest() const;
  // Per region: the rounds it has trained.
  const std::map<std::string, uint64_t>& trained() const { return trained_; }

 private:
  std::vector<std::string> regions_;
  std::map<std::string, uint64_t> trained_, newest_;
};

// Useful rounds per second over a window of a progress timeline: from the first point at which
// every region had finished a round (t_ready) to `until` (or the last point, if the run stopped
// first): (rounds at the end - rounds at t_ready) / (end - t_ready).
struct WindowRate {
  double ready_s = 0, end_s = 0;
  uint64_t rounds_at_ready = 0, rounds_at_end = 0;
  double window_s() const { return end_s - ready_s; }
  uint64_t rounds() const { return rounds_at_end - rounds_at_ready; }
  double rounds_per_s() const {
    return window_s() > 0 ? static_cast<double>(rounds()) / window_s() : 0;
  }
};
std::optional<WindowRate> window_rate(const std::vector<ProgressPoint>& timeline,
                                      std::optional<double> until);
// A given reference's window (`--reference RUN_DIR`): as long as a measured one, `window_s` from
// every region's first round, or up to the folder's last round when it ends earlier. (A measured
// reference is stopped at its window's end and finishes a round or two after it: counted, they
// raised its rate by 1% on the LM demo against the same run measured.)
std::optional<WindowRate> given_rate(const std::vector<ProgressPoint>& timeline, double window_s);

// A run folder's timeline, from its leaders' metrics (worker-<region>-0.metrics.jsonl, `round`
// events with steps > 0; times are the leaders' own, which start within a fraction of a second
// of each other): for `--reference RUN_DIR`. InputError when the folder has no leader metrics.
std::vector<ProgressPoint> folder_timeline(const std::filesystem::path& run_dir);

// netsim.links with the planned partitions added to the user's entries (a link's `faults` list
// is appended to; a link the user did not list gets an entry), as YAML flow text for an
// override of netsim.links. `user_links` is the user's netsim.links node (may be null).
std::string links_with_partitions(const YAML::Node& user_links,
                                  const std::vector<PlannedFault>& faults);

}  // namespace geotrain::launcher
