#include "launcher/chaos/chaos.hpp"

#include <fmt/ranges.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <thread>

#include "core/config_overrides.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/run_summary_keys.hpp"
#include "launcher/chaos/chaos_observer.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/run_settings.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

constexpr const char* kOrigin = "geotrain chaos";
// Rounds enough for any window: the harness stops each run at the end of its window.
constexpr uint64_t kChaosRounds = 1'000'000;

struct RunOutcome {
  RunResult result;
  ObservedRun seen;
};

// Runs the config (with `overrides` added) in `out_parent`, watched by a RunObserver.
RunOutcome observe_run(const ChaosOptions& o, std::vector<ConfigOverride> overrides,
                       const fs::path& out_parent, const std::vector<std::string>& regions,
                       double window_s, std::vector<PlannedFault> faults,
                       const std::vector<std::string>& kinds, Clock::time_point t0,
                       const std::stop_token& user_stop, bool finish_after_window = false) {
  LaunchOptions run = o.run;
  run.overrides.insert(run.overrides.end(), overrides.begin(), overrides.end());
  run.out_dir = out_parent;
  std::stop_source run_stop;
  RunObserver observer(out_parent, regions, window_s, std::move(faults), kinds, t0, run_stop,
                       finish_after_window);
  std::atomic<bool> over{false};
  std::thread watch([&] {
    while (!over.load() && observer.tick(user_stop))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  RunOutcome out;
  try {
    out.result = run_deployment(run, run_stop.get_token());
  } catch (...) {
    over = true;
    watch.join();
    throw;
  }
  over = true;
  watch.join();
  out.seen = observer.finish();
  return out;
}

// Processes whose command line names the run folder (its config.yaml / netsim.yaml): none should
// be left once run_deployment returned.
std::vector<int> leftover_pids(const fs::path& run_dir) {
  std::vector<int> out;
  if (run_dir.empty()) return out;
  const auto needle = fs::absolute(run_dir).string() + "/";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const auto name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const int pid = std::stoi(name);
    if (pid != ::getpid() && cmd.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

json rate_json(const std::optional<WindowRate>& w) {
  if (!w) return {{"window_s", nullptr}, {"rounds", nullptr}, {"rounds_per_s", nullptr}};
  return {
      {"window_s", w->window_s()}, {"rounds", w->rounds()}, {"rounds_per_s", w->rounds_per_s()}};
}

// A run ended as planned: stopped by the harness at its window's end, or finished its rounds.
bool as_planned(const RunOutcome& r) {
  return r.result.status == "completed" ||
         (r.result.status == "interrupted" && r.seen.window_end_s.has_value());
}

std::string status_of(const RunOutcome& r) {
  if (r.result.status == "interrupted" && r.seen.window_end_s) return "stopped at window end";
  return r.result.status;
}

std::optional<uint64_t> restarts_of(const fs::path& run_dir) {
  const auto s = read_summary(run_dir);
  if (!s || !s->contains(k::restarts) || !(*s)[k::restarts].is_number()) return std::nullopt;
  return (*s)[k::restarts].get<uint64_t>();
}
}  // namespace

namespace {

// --kill: the kinds of process faults may hit (default: every kind run.restart brings back).
std::vector<std::string> chaos_kinds(const ChaosOptions& o) {
  std::vector<std::string> kinds = o.kill_kinds;
  if (kinds.empty()) kinds.assign(kRestartableKinds.begin(), kRestartableKinds.end());
  for (const auto& k : kinds) {
    GT_REQUIRE(k == "server" || k == "netsim" || k == "leader" || k == "worker",
               "--kill {}: the kinds of process are server, netsim, leader and worker", k);
    GT_REQUIRE(launcher_restarts(k),
               "--kill {}: geotrain run does not restart a {} yet, so killing one would only fail "
               "the run (run.restart brings back: {})",
               k, k, fmt::join(kRestartableKinds, ", "));
  }
  GT_REQUIRE(o.duration_s > 0 && o.kill_every_s > 0,
             "--duration and --kill-every must be positive");
  return kinds;
}

std::vector<PlannedFault> plan_chaos(const ChaosOptions& o, const RunSettings& settings) {
  ScheduleInputs in;
  in.seed = o.seed;
  in.every_s = o.kill_every_s;
  in.first_at_s = o.first_fault_s.value_or(std::max(o.kill_every_s, 15.0));
  // Startup takes a few seconds more or less: plan past any window end; the rest never happens.
  in.horizon_s = in.first_at_s + o.duration_s + settings.startup_timeout_s + 120;
  in.mix = o.mix;
  in.stop_s = o.stop_s;
  in.partition_s = o.partition_s;
  in.regions = settings.regions;
  in.partitions_possible = settings.regions.size() > 1;  // netsim carries every WAN link then
  auto faults = plan_faults(in);
  // --verify: the run goes on past its window to finish its rounds, without faults; netsim would
  // still cut the links planned then (the harness stops the other faults itself).
  if (o.verify)
    std::erase_if(faults, [&](const PlannedFault& f) {
      return f.fault == ChaosFault::partition && f.at_s >= o.duration_s;
    });
  return faults;
}

// What both runs share: the same config under run.restart (so with the same checkpoints),
// enough rounds, a timeout past the window.
struct CommonRun {
  const RunSettings& settings;
  uint64_t restarts;
  double backoff;
  // `rounds`: the run's (--verify); by default more than any window holds.
  std::vector<ConfigOverride> overrides(const std::string& suffix, double window,
                                        std::optional<uint64_t> rounds = std::nullopt) const {
    // A run that finishes its rounds goes on past the window: as long again at most.
    const double timeout = window * (rounds ? 2 : 1) + settings.startup_timeout_s + 900;
    return {{"worker.rounds", std::to_string(rounds.value_or(kChaosRounds)), kOrigin},
            {"run.name", settings.name + "-" + suffix, kOrigin},
            {"run.timeout_s", fmt::format("{}", timeout), kOrigin},
            {"run.restart",
             fmt::format("{{max_restarts: {}, backoff_s: {}, healthy_after_s: {}}}", restarts,
                         backoff, settings.restart.healthy_after_s),
             kOrigin}};
  }
};

// One of the two runs: its part of chaos.json, its rounds per second over the window, why it
// failed (empty when it ran as planned) and the processes it left behind.
struct Leg {
  json report;
  std::optional<WindowRate> rate;
  std::string failure;
  std::vector<int> leftovers;
};

// The reference: measured now without faults, or `given` (read from o.reference's run folder).
Leg reference_leg(const ChaosOptions& o, const CommonRun& common, const fs::path& dir,
                  const std::vector<std::string>& kinds, const std::optional<WindowRate>& given,
                  const std::stop_token& stop) {
  Leg leg;
  leg.report = {{"source", o.reference ? "given" : "measured"}};
  if (o.reference) {
    leg.rate = given;
    leg.report["run_dir"] = fs::absolute(*o.reference).string();
    leg.report["status"] = "given";
  } else {
    const double window = o.reference_duration_s.value_or(o.duration_s);
    spdlog::info("chaos: reference run (no faults), measured for {:.0f} s", window);
    const auto r = observe_run(o, common.overrides("reference", window), dir / "reference",
                               common.settings.regions, window, {}, kinds, Clock::now(), stop);
    leg.rate = window_rate(r.seen.timeline, r.seen.window_end_s);
    leg.report["run_dir"] = r.result.run_dir.string();
    leg.report["status"] = status_of(r);
    if (!as_planned(r) && !stop.stop_requested())
      leg.failure =
          fmt::format("the reference run {} ({})", r.result.status, r.result.run_dir.string());
    leg.leftovers = leftover_pids(r.result.run_dir);
  }
  leg.report.update(rate_json(leg.rate));
  return leg;
}

// --verify's part of chaos.json, from the chaos run's summary.json: the rounds it was given,
// whether it finished them, whether its global model is the same everywhere, the rounds its
// faults cost (trained again), and why not ok.
json verify_report(const fs::path& run_dir, uint64_t rounds) {
  json v{{"rounds", rounds}, {"identical", nullptr}, {"check", nullptr}};
  const auto s = read_summary(run_dir);
  if (!s) {
    v["ok"] = false;
    v["why"] = "the chaos run wrote no summary.json";
    return v;
  }
  v["status"] = s->value(k::status, "");
  v["rounds_done"] = s->value(k::rounds, 0);
  if (s->contains(k::global_model_identical)) v["identical"] = (*s)[k::global_model_identical];
  if (s->contains(k::global_model_check)) v["check"] = (*s)[k::global_model_check];
  uint64_t lost = 0;
  for (const auto& f : s->value(k::faults, json::array()))
    if (f.contains(k::rounds_lost) && f[k::rounds_lost].is_number_unsigned())
      lost += f[k::rounds_lost].get<uint64_t>();
  v["rounds_lost"] = lost;
  std::string why;
  if (v["status"] != "completed")
    why = fmt::format("the run {} before its {} rounds", v["status"].get<std::string>(), rounds);
  else if (v["identical"] != true)
    why = fmt::format("the global model is not the same everywhere: {}",
                      v["check"].is_string() ? v["check"].get<std::string>() : "no check");
  v["ok"] = why.empty();
  v["why"] = why.empty() ? json() : json(why);
  return v;
}

// The run with faults; `counts` gets the faults planned and injected, `injected` their list.
// With `rounds` (--verify), the run finishes them and `report` gets `verify`.
Leg chaos_leg(const ChaosOptions& o, const CommonRun& common, const std::string& text,
              const std::vector<PlannedFault>& faults, const fs::path& dir,
              const std::vector<std::string>& kinds, std::optional<uint64_t> rounds,
              const std::stop_token& stop, json& report) {
  auto overrides = common.overrides("chaos", o.duration_s, rounds);
  YAML::Node user = YAML::Load(text);
  const bool partitions = std::any_of(faults.begin(), faults.end(), [](const PlannedFault& f) {
    return f.fault == ChaosFault::partition;
  });
  const auto t0 = Clock::now();
  const double origin =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (partitions) {
    overrides.push_back({"netsim.faults_origin_unix_s", fmt::format("{:.3f}", origin), kOrigin});
    overrides.push_back(
        {"netsim.links",
         links_with_partitions(user["netsim"] ? user["netsim"]["links"] : YAML::Node(), faults),
         kOrigin});
  }
  spdlog::info("chaos: chaos run, one fault every ~{:.0f} s for {:.0f} s (seed {})", o.kill_every_s,
               o.duration_s, o.seed);
  const auto r = observe_run(o, overrides, dir / "chaos", common.settings.regions, o.duration_s,
                             faults, kinds, t0, stop, rounds.has_value());
  Leg leg;
  leg.report["memory"] = r.seen.memory;
  leg.rate = window_rate(r.seen.timeline, r.seen.window_end_s);
  leg.report["run_dir"] = r.result.run_dir.string();
  leg.report["status"] = status_of(r);
  leg.report.update(rate_json(leg.rate));
  leg.report["restarts"] = restarts_of(r.result.run_dir).value_or(0);
  leg.report["rounds_trained"] = r.seen.rounds_trained;
  json counts{{"planned", r.seen.planned_in_window}, {"injected", r.seen.injected.size()}};
  for (const char* k : {"kill", "stop", "partition"})
    counts[k] = r.seen.count.count(k) ? r.seen.count.at(k) : 0;
  report["faults"] = counts;
  report["injected"] = r.seen.injected;
  if (!as_planned(r) && !stop.stop_requested())
    leg.failure = fmt::format("the chaos run {} ({}): see its report.md", r.result.status,
                              r.result.run_dir.string());
  if (rounds) {
    report["verify"] = verify_report(r.result.run_dir, *rounds);
    if (leg.failure.empty() && !stop.stop_requested() && !report["verify"]["ok"].get<bool>())
      leg.failure = "--verify: " + report["verify"]["why"].get<std::string>();
  }
  leg.leftovers = leftover_pids(r.result.run_dir);
  return leg;
}

// --verify: the rounds the reference does in the window (at least one past the first, which the
// window starts after).
std::optional<uint64_t> verify_rounds(const ChaosOptions& o, const std::optional<WindowRate>& ref) {
  if (!o.verify || !ref) return std::nullopt;
  return static_cast<uint64_t>(std::ceil(ref->rounds_per_s() * o.duration_s)) + 1;
}

json options_json(const ChaosOptions& o, const std::vector<std::string>& kinds) {
  return {{"config", fs::absolute(o.run.config).string()},
          {"seed", o.seed},
          {"duration_s", o.duration_s},
          {"kill_every_s", o.kill_every_s},
          {"stop_s", o.stop_s},
          {"partition_s", o.partition_s},
          {"mix", {{"kill", o.mix.kill}, {"stop", o.mix.stop}, {"partition", o.mix.partition}}},
          {"kill_kinds", kinds},
          {"verify", o.verify}};
}

}  // namespace

ChaosResult run_chaos(const ChaosOptions& o, std::stop_token stop) {
  const auto kinds = chaos_kinds(o);
  const auto source = describe_source(o.run.config.string(), o.run.overrides);
  const auto text = apply_overrides(read_text_file(o.run.config), o.run.overrides, source);
  const auto settings = parse_run_settings(text, source, o.run.config.parent_path(),
                                           o.run.config.stem().string(), o.run.project_configs);
  if (o.run.validate) o.run.validate(text, source);
  // A reference folder is read now: one without a rate starts nothing.
  std::optional<WindowRate> given;
  if (o.reference) {
    GT_REQUIRE(fs::is_directory(*o.reference),
               "chaos: --reference '{}' is not a run folder: no such directory",
               o.reference->string());
    given =
        given_rate(folder_timeline(*o.reference), o.reference_duration_s.value_or(o.duration_s));
    GT_REQUIRE(given && given->rounds_per_s() > 0,
               "chaos: --reference '{}' has no rounds to take a rate from (its leaders' "
               "worker-<region>-0.metrics.jsonl)",
               o.reference->string());
  }

  ChaosResult out;
  out.dir = create_run_folder(o.out_dir.value_or(settings.out_dir), "chaos-" + settings.name,
                              std::chrono::system_clock::now());
  const auto faults = plan_chaos(o, settings);
  // A stopped server may end in a restart too: with server.standby, one continued after its
  // standby took over leaves, to be restarted (docs/server.md, "Standby shards").
  size_t kills = 0;
  for (const auto& f : faults) kills += f.fault == ChaosFault::kill || f.fault == ChaosFault::stop;
  const CommonRun common{settings, std::max<uint64_t>(settings.restart.max_restarts, kills + 1),
                         settings.restart.enabled() ? settings.restart.backoff_s : 1.0};

  json report = options_json(o, kinds);
  const Leg ref = reference_leg(o, common, out.dir, kinds, given, stop);
  report["reference"] = ref.report;
  std::string failure = ref.failure;
  if (failure.empty() && o.verify && !stop.stop_requested() &&
      (!ref.rate || ref.rate->rounds_per_s() <= 0))
    failure = "--verify: the reference has no rate to give the chaos run its rounds";
  std::vector<int> leftovers = ref.leftovers;
  Leg chaos;
  chaos.report = {{"run_dir", nullptr}, {"status", "not run"}};
  chaos.report.update(rate_json(std::nullopt));
  if (!stop.stop_requested() && failure.empty()) {
    chaos = chaos_leg(o, common, text, faults, out.dir, kinds, verify_rounds(o, ref.rate), stop,
                      report);
    failure = chaos.failure;
    leftovers.insert(leftovers.end(), chaos.leftovers.begin(), chaos.leftovers.end());
  }
  report["chaos"] = chaos.report;
  const bool both = ref.rate && chaos.rate && ref.rate->rounds_per_s() > 0;
  report["goodput"] = both ? json(chaos.rate->rounds_per_s() / ref.rate->rounds_per_s()) : json();
  report["leftover_pids"] = leftovers;
  if (failure.empty() && !leftovers.empty())
    failure = fmt::format("{} process(es) left behind", leftovers.size());
  if (failure.empty() && o.min_goodput && !stop.stop_requested() &&
      (!both || report["goodput"].get<double>() < *o.min_goodput))
    failure = fmt::format("goodput {} is below --min-goodput {}",
                          both ? fmt::format("{:.3f}", report["goodput"].get<double>()) : "unknown",
                          *o.min_goodput);
  report["ok"] = failure.empty() && !stop.stop_requested();
  report["failure"] = failure.empty() ? json() : json(failure);
  write_text_file(out.dir / "chaos.json", report.dump(2) + "\n");
  out.report = report;
  out.exit_code = stop.stop_requested() ? 130 : failure.empty() ? 0 : 1;
  return out;
}

std::string describe_chaos(const json& r) {
  const auto num = [](const json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-");
  };
  std::string s;
  const auto& ref = r["reference"];
  s += fmt::format(
      "reference ({}): {} rounds in {} s = {} rounds/s  [{}]\n", ref.value("source", ""),
      num(ref["rounds"], "{:.0f}"), num(ref["window_s"], "{:.1f}"),
      num(ref["rounds_per_s"], "{:.3f}"),
      ref.value("run_dir", json("")).is_string() ? ref["run_dir"].get<std::string>() : "");
  const auto& c = r["chaos"];
  s += fmt::format("chaos: {} rounds in {} s = {} rounds/s, {}  [{}]\n", num(c["rounds"], "{:.0f}"),
                   num(c["window_s"], "{:.1f}"), num(c["rounds_per_s"], "{:.3f}"),
                   c.value("status", ""),
                   c["run_dir"].is_string() ? c["run_dir"].get<std::string>() : "");
  if (r.contains("faults")) {
    const auto& f = r["faults"];
    s += fmt::format(
        "faults: {} injected of {} planned in the window ({} kill, {} stop, {} "
        "partition); {} restart(s)\n",
        f.value("injected", 0), f.value("planned", 0), f.value("kill", 0), f.value("stop", 0),
        f.value("partition", 0), c.value("restarts", 0));
  }
  s += fmt::format("goodput: {} of fault-free\n", num(r["goodput"], "{:.3f}"));
  if (r.contains("verify") && r["verify"].is_object()) {  // false: not asked for
    const auto& v = r["verify"];
    s += fmt::format("verify: {} rounds, {}; global model {}; {} round(s) trained again\n",
                     v.value("rounds", 0), v.value("status", std::string("no summary")),
                     v["check"].is_string() ? v["check"].get<std::string>() : "not checked",
                     v.value("rounds_lost", 0));
  }
  if (c.contains("memory") && c["memory"].contains("growth_kib") &&
      !c["memory"]["growth_kib"].empty()) {
    std::string growth;
    for (const auto& [kind, kib] : c["memory"]["growth_kib"].items())
      growth += fmt::format("{}{} {:+.1f} MiB", growth.empty() ? "" : ", ", kind,
                            kib.get<double>() / 1024);
    s += fmt::format(
        "memory (largest growth, median of the last {:.0f} s over the first after "
        "{:.0f} s): {}\n",
        c["memory"].value("span_s", 0.0), c["memory"].value("settle_s", 0.0), growth);
  }
  s += fmt::format("left behind: {}\n", r["leftover_pids"].empty() ? std::string("no process")
                                                                   : r["leftover_pids"].dump());
  s += r["ok"].get<bool>() ? "chaos: ok\n"
                           : fmt::format("chaos: FAILED: {}\n",
                                         r["failure"].is_string() ? r["failure"].get<std::string>()
                                                                  : "interrupted");
  return s;
}

}  // namespace geotrain::launcher
