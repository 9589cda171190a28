#include "launcher/launcher.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "launcher/child_process.hpp"
#include "launcher/deployment.hpp"
#include "launcher/fault_log.hpp"
#include "launcher/jsonl_tail.hpp"
#include "launcher/progress_display.hpp"
#include "launcher/resume.hpp"
#include "launcher/run_folder.hpp"
#include "launcher/run_summary.hpp"
#include "wire/curve_keys.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
// The progress display lists this many of the newest faults (events.jsonl has them all).
constexpr size_t kFaultLinesShown = 6;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Running {
  ProcessSpec spec;
  ChildProcess child;
  fs::path log;
  // run.restart: a server or netsim that died is brought back in phases: backoff (dead, waiting
  // run.restart.backoff_s), starting (until its ports accept connections), resuming (until
  // every region has finished a round since), running.
  enum class Phase { running, backoff, starting, resuming } phase = Phase::running;
  uint32_t restarts = 0;
  Clock::time_point phase_until{};  // end of the backoff, or the startup deadline
  size_t fault = 0;                 // its newest fault in the FaultLog
  // A server's own round when it died (server_round); fewest rounds any region had finished
  // when it died for the others.
  uint64_t rounds_at_death = 0;
  std::map<std::string, uint64_t> rounds_at_up{};  // each region's finished rounds once it was up
  std::optional<JsonlTail> metrics{};              // a server's metrics, read from its restart on
};

// The children of one run, started into one process group; stops them all on destruction.
class Fleet {
 public:
  Fleet(std::string binary, fs::path run_dir, double grace_s)
      : binary_(std::move(binary)), run_dir_(std::move(run_dir)), grace_s_(grace_s) {}
  ~Fleet() { stop_all(); }
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  Running& start(const ProcessSpec& spec) {
    const auto log = run_dir_ / (spec.name + ".log");
    ChildProcess child(binary_, spec.args, log, group_);
    if (group_ == 0) group_ = child.pid();
    spdlog::debug("run: started {} (pid {})", spec.name, child.pid());
    procs_.push_back(std::make_unique<Running>(Running{spec, std::move(child), log}));
    if (events_)
      events_->started(seconds_since(t0_), spec.name, to_string(spec.role),
                       procs_.back()->child.pid(), 0);
    return *procs_.back();
  }
  // Starts a process that died again, with the same arguments (and so the same ports) plus
  // `extra`; its log goes on in the same file.
  void restart(Running& p, const std::vector<std::string>& extra = {}) {
    std::ofstream(p.log, std::ios::app) << fmt::format(
        "--- geotrain run: restarting {} (restart {}) ---\n", p.spec.name, p.restarts);
    auto args = p.spec.args;
    args.insert(args.end(), extra.begin(), extra.end());
    p.child = ChildProcess(binary_, args, p.log, group_);
    spdlog::debug("run: restarted {} (pid {})", p.spec.name, p.child.pid());
    if (events_)
      events_->started(seconds_since(t0_), p.spec.name, to_string(p.spec.role), p.child.pid(),
                       p.restarts);
  }
  // Every start goes to events.jsonl, with times since t0.
  void record(FaultLog* events, Clock::time_point t0) {
    events_ = events;
    t0_ = t0;
  }
  std::vector<std::unique_ptr<Running>>& procs() { return procs_; }

  // SIGTERM to the still-running processes of one role (all roles when none is given), then
  // wait up to the grace period, then SIGKILL.
  void stop(std::optional<ProcessRole> role) {
    std::vector<Running*> targets;
    for (auto& p : procs_)
      if ((!role || p->spec.role == *role) && !p->child.poll()) targets.push_back(p.get());
    for (auto* p : targets) p->child.signal(SIGTERM);
    const auto deadline = Clock::now() + seconds(grace_s_);
    for (auto* p : targets) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (!p->child.wait_for(std::max(left, std::chrono::milliseconds(0)))) {
        spdlog::warn("run: {} did not stop within {} s of SIGTERM; killing it", p->spec.name,
                     grace_s_);
        p->child.signal(SIGKILL);
        p->child.wait_for(std::chrono::seconds(5));
      }
    }
  }
  void stop_all() {
    stop(ProcessRole::worker);
    stop(std::nullopt);
  }

 private:
  std::string binary_;
  fs::path run_dir_;
  double grace_s_;
  pid_t group_ = 0;
  FaultLog* events_ = nullptr;
  Clock::time_point t0_;
  std::vector<std::unique_ptr<Running>> procs_;
};

// worker.external: the servers and netsim are up; tell the user's leaders where to connect, on
// the console and in <run>/endpoints.json (whose existence says the servers are up).
void announce_external_leaders(const Deployment& plan, const RunSettings& s, const fs::path& run,
                               double up_after_s) {
  nlohmann::json j;
  j["config"] = fs::absolute(run / "config.yaml").string();
  j["regions"] = s.regions;
  for (const auto& r : s.regions)
    j["servers"][r] = fmt::format("tcp://{}:{}", plan.host, plan.server_ports.at(r));
  for (const auto& [r, port] : plan.metrics_ports)
    j["metrics"][r] = fmt::format("http://{}:{}/metrics", plan.host, port);
  j["routes"] = nlohmann::json::object();
  for (const auto& route : plan.routes)
    j["routes"][route.from][route.to] = fmt::format("tcp://{}:{}", plan.host, route.listen_port);
  write_text_file(run / "endpoints.json.tmp", j.dump(2) + "\n");
  fs::rename(run / "endpoints.json.tmp", run / "endpoints.json");
  spdlog::info(
      "run: servers{} up after {:.1f} s; waiting for the leaders of {} region(s) "
      "(worker.external): each reads {}",
      plan.netsim_yaml ? " and netsim" : "", up_after_s, s.regions.size(),
      j["config"].get<std::string>());
  for (const auto& from : s.regions) {
    std::string line;
    for (const auto& to : s.regions) {
      std::string e = j["servers"][to];
      if (j["routes"].contains(from) && j["routes"][from].contains(to)) e = j["routes"][from][to];
      line += fmt::format(" {}={}", to, e);
    }
    spdlog::info("run: leader of {} connects to{}", from, line);
  }
}

// True while some region's leader has not logged its `done` event.
bool external_leaders_left(const RunMonitor& monitor, const std::vector<std::string>& regions) {
  for (const auto& r : regions) {
    auto w = monitor.workers().find({r, 0});
    if (w == monitor.workers().end() || !w->second.done) return true;
  }
  return false;
}

// The fewest rounds any region has finished (0 before every region reported one).
uint64_t fewest_rounds(const RunMonitor& monitor, const std::vector<std::string>& regions) {
  uint64_t fewest = UINT64_MAX;
  for (const auto& r : regions) {
    auto it = monitor.regions().find(r);
    fewest = std::min(fewest, it == monitor.regions().end() ? 0 : it->second.rounds_done);
  }
  return fewest == UINT64_MAX ? 0 : fewest;
}

// The round of the newest `restore` event among a server's new metrics lines, if any.
std::optional<uint64_t> restored_round(JsonlTail& metrics) {
  std::optional<uint64_t> round;
  for (const auto& e : metrics.read_new())
    if (e.value("event", std::string()) == "restore" && e.contains("round") &&
        e["round"].is_number_unsigned())
      round = e["round"].get<uint64_t>();
  return round;
}

// A server's own round (what its checkpoint calls its round): the oldest of its shards' newest
// released rounds, from its metrics' `round` events. Regions count rounds their own way: a region
// that merged a server's shards late (worker.shard_wait_ms) is ahead of that server's count.
std::optional<uint64_t> server_round(const fs::path& metrics) {
  std::map<uint64_t, uint64_t> newest;  // shard -> newest released round
  for (const auto& e : read_jsonl(metrics))
    if (e.value("event", std::string()) == "round" && e.contains("shard") &&
        e["shard"].is_number_unsigned() && e.contains("round") && e["round"].is_number_unsigned())
      newest[e["shard"].get<uint64_t>()] =
          std::max(newest[e["shard"].get<uint64_t>()], e["round"].get<uint64_t>());
  if (newest.empty()) return std::nullopt;
  uint64_t oldest = UINT64_MAX;
  for (const auto& [shard, round] : newest) oldest = std::min(oldest, round);
  return oldest;
}

std::string failure_message(const Running& p, int status) {
  return fmt::format("{} failed ({}); last lines of {}:\n{}", p.spec.name, describe_status(status),
                     p.log.string(), tail_lines(p.log, 20));
}

// Waits until every port of `p` accepts connections. Returns "" when up, else why not.
std::string wait_healthy(Running& p, Clock::time_point deadline, const std::stop_token& stop) {
  for (;;) {
    if (auto st = p.child.poll()) return failure_message(p, *st);
    bool up = true;
    for (auto port : p.spec.health_ports) up = up && port_accepts("127.0.0.1", port);
    if (up) return "";
    if (stop.stop_requested()) return "interrupted";
    if (Clock::now() > deadline)
      return fmt::format(
          "{} did not accept connections on its port(s) in time; last lines of {}:\n{}",
          p.spec.name, p.log.string(), tail_lines(p.log, 20));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A terminal is redrawn twice a second; logs get a block every run.progress_interval_s.
double display_refresh(const LaunchOptions& o, const RunSettings& s) {
  const bool tty = o.redraw.value_or(::isatty(::fileno(o.progress)) == 1);
  return tty ? std::min(0.5, s.progress_interval_s) : s.progress_interval_s;
}

// run.restart for one region's workers. A Gloo/NCCL group cannot lose a member, so the death of
// any worker of a region (leader or not) stops the region's other workers (SIGKILL: their state
// is in their snapshots) and, after run.restart.backoff_s, starts the whole group again with
// --resume and a new --generation (worker/trainer.hpp). Phases: backoff (the group is down),
// resuming (until the leader's `resume` event: the restart is done, and the event names the
// snapshot round), recovering (until the leader finishes a round after it).
struct RegionRecovery {
  enum class Phase { running, backoff, resuming, recovering } phase = Phase::running;
  uint32_t restarts = 0;
  Clock::time_point backoff_until{};
  size_t fault = 0;
  uint64_t last_round = 0;       // the newest round the region's leader finished
  uint64_t rounds_at_death = 0;  // last_round when the worker died
  uint64_t resumed_at = 0;       // the round the restarted group trains first
  bool down() const { return phase != Phase::running; }
};

// The extra arguments of a restarted worker group.
std::vector<std::string> resume_args(uint32_t generation) {
  return {"--resume", "--generation", std::to_string(generation)};
}

// Stops every still-running worker of `region` now (SIGKILL) and reaps it.
void kill_region_workers(std::vector<std::unique_ptr<Running>>& procs, const std::string& region) {
  for (auto& p : procs)
    if (p->spec.role == ProcessRole::worker && p->spec.region == region && !p->child.poll())
      p->child.signal(SIGKILL);
  for (auto& p : procs)
    if (p->spec.role == ProcessRole::worker && p->spec.region == region)
      p->child.wait_for(std::chrono::seconds(5));
}

void make_plots(const LaunchOptions& o, const fs::path& run_dir) {
  if (o.plot_script.empty()) return;
  if (!fs::exists(o.python) || !fs::exists(o.plot_script)) {
    spdlog::warn(
        "run: plots skipped: {} or {} is missing (scripts/bootstrap.sh installs "
        "python3-matplotlib)",
        o.python, o.plot_script.string());
    return;
  }
  ChildProcess plot(o.python, {o.plot_script.string(), run_dir.string()}, run_dir / "plots.log");
  auto st = plot.wait_for(std::chrono::seconds(120));
  if (!st)
    spdlog::warn("run: plot script timed out; see {}", (run_dir / "plots.log").string());
  else if (*st != 0)
    spdlog::warn("run: plot script failed ({}):\n{}", describe_status(*st),
                 tail_lines(run_dir / "plots.log", 10));
}
}  // namespace

RunResult run_deployment(const LaunchOptions& o, std::stop_token stop) {
  // --resume: the stopped run's own config and folder (launcher/resume.hpp).
  const fs::path config_file = o.resume ? *o.resume / "config.yaml" : o.config;
  const auto source = describe_source(config_file.string(), o.overrides);
  const auto text = apply_overrides(
      o.resume ? resume_config_text(*o.resume) : read_text_file(config_file), o.overrides, source);
  auto settings =
      parse_run_settings(text, source, config_file.parent_path(), config_file.stem().string());
  if (o.out_dir) settings.out_dir = *o.out_dir;
  if (o.validate) o.validate(text, source);

  RunResult result;
  result.run_dir = o.resume ? *o.resume
                            : create_run_folder(settings.out_dir, settings.name,
                                                std::chrono::system_clock::now());
  if (o.resume)
    spdlog::info("run: resuming {}: servers from their checkpoints, workers from their snapshots",
                 result.run_dir.string());
  const auto& run_dir = result.run_dir;
  Deployment plan;
  {
    PortAllocator ports(settings.base_port);
    plan = plan_deployment(text, source, settings, run_dir, ports);
    if (plan.keys_to_generate) {
      wire::KeyDirectory::generate(*plan.keys_to_generate, settings.regions, /*force=*/false);
      spdlog::info("run: CURVE keys generated in {}", plan.keys_to_generate->string());
    }
    write_text_file(run_dir / "config.yaml", plan.config_yaml);
    if (plan.netsim_yaml) write_text_file(run_dir / "netsim.yaml", *plan.netsim_yaml);
    if (o.validate) o.validate(plan.config_yaml, (run_dir / "config.yaml").string());
  }  // probe sockets closed: the children bind the ports now
  spdlog::info("run: {} region(s) x {} worker(s), run folder {}", settings.regions.size(),
               settings.workers_per_region, run_dir.string());
  if (!plan.metrics_ports.empty()) {  // server.metrics_port: where Prometheus scrapes
    std::string line;
    for (const auto& [r, port] : plan.metrics_ports)
      line += fmt::format(" {}=http://{}:{}/metrics", r, plan.host, port);
    spdlog::info("run: Prometheus metrics of the servers:{}", line);
  }

  const auto t0 = Clock::now();
  std::string failure;
  std::string status = "completed";
  FaultLog faults(run_dir / "events.jsonl");
  {
    Fleet fleet(o.binary, run_dir, o.grace_s);
    fleet.record(&faults, t0);
    // Servers and netsim, each healthy before the workers start.
    const auto deadline = t0 + seconds(settings.startup_timeout_s);
    for (const auto& spec : plan.processes) {
      if (spec.role == ProcessRole::worker) continue;
      failure = wait_healthy(fleet.start(spec), deadline, stop);
      if (!failure.empty()) break;
    }
    if (failure.empty() && settings.external_workers) {
      announce_external_leaders(plan, settings, run_dir, seconds_since(t0));
    } else if (failure.empty()) {
      spdlog::info("run: servers{} up after {:.1f} s; starting {} worker(s)",
                   plan.netsim_yaml ? " and netsim" : "", seconds_since(t0),
                   settings.regions.size() * settings.workers_per_region);
      for (auto spec : plan.processes)
        if (spec.role == ProcessRole::worker) {
          if (o.resume) spec.args.push_back("--resume");
          fleet.start(spec);
        }
    }

    RunMonitor monitor(settings.target());
    std::vector<JsonlTail> tails;
    for (const auto& spec : plan.processes)
      if (spec.role == ProcessRole::worker)
        tails.emplace_back(run_dir /
                           fmt::format("worker-{}-{}.metrics.jsonl", spec.region, spec.rank));
    if (settings.external_workers)  // the external leaders write the leader's metrics file
      for (const auto& r : settings.regions)
        tails.emplace_back(run_dir / fmt::format("worker-{}-0.metrics.jsonl", r));
    ProgressDisplay display(o.progress, o.redraw.value_or(::isatty(::fileno(o.progress)) == 1));
    // The faults `geotrain chaos` injects beside this launcher (stops and partitions, lines "by":
    // "chaos" in events.jsonl) show with the launcher's own.
    JsonlTail events_tail(run_dir / "events.jsonl");
    std::vector<nlohmann::json> chaos_events;
    const auto fault_notes = [&] {
      for (auto& e : events_tail.read_new())
        if (e.is_object() && e.value("by", std::string()) == "chaos")
          chaos_events.push_back(std::move(e));
      auto all = faults.faults();
      for (auto& f : fold_fault_list(chaos_events)) all.push_back(std::move(f));
      return fault_lines(std::move(all), kFaultLinesShown);
    };
    const double refresh = display_refresh(o, settings);
    auto next_show = Clock::now();
    // A server or netsim died: restart it (run.restart) or fail the run.
    const auto on_death = [&](Running& p, int st) {
      const bool again = p.restarts < settings.restart.max_restarts;
      p.fault = faults.fault(seconds_since(t0), p.spec.name, to_string(p.spec.role), p.spec.region,
                             describe_status(st), again, again ? p.restarts + 1 : p.restarts);
      if (!again) {
        failure = failure_message(p, st);
        if (settings.restart.enabled())
          failure = fmt::format("run.restart.max_restarts = {} used up: {}",
                                settings.restart.max_restarts, failure);
        return;
      }
      ++p.restarts;
      spdlog::warn("run: {} {} at {:.1f} s; restarting it in {} s (restart {} of {})", p.spec.name,
                   describe_status(st), seconds_since(t0), settings.restart.backoff_s, p.restarts,
                   settings.restart.max_restarts);
      p.rounds_at_death = fewest_rounds(monitor, settings.regions);
      if (p.spec.role == ProcessRole::server)
        if (auto r = server_round(run_dir / fmt::format("server-{}.metrics.jsonl", p.spec.region)))
          p.rounds_at_death = *r;
      p.phase = Running::Phase::backoff;
      p.phase_until = Clock::now() + seconds(settings.restart.backoff_s);
    };
    // run.restart for workers: the region's whole group goes down and comes back (RegionRecovery).
    std::map<std::string, RegionRecovery> recovery;
    const auto leader_finished = [&](const std::string& region) {
      for (auto& p : fleet.procs())
        if (p->spec.role == ProcessRole::worker && p->spec.region == region && p->spec.rank == 0)
          return p->child.poll() == 0;
      return false;
    };
    const auto on_worker_death = [&](Running& first_seen, int first_status) {
      // When a worker of a group dies, the others fail on the broken collective moments later:
      // blame one that a signal killed over one that exited with an error, if there is one.
      Running* dead = &first_seen;
      int st = first_status;
      for (auto& q : fleet.procs()) {
        const auto qs = q->child.poll();
        if (q->spec.role == ProcessRole::worker && q->spec.region == first_seen.spec.region && qs &&
            *qs > 128 && st <= 128) {
          dead = q.get();
          st = *qs;
        }
      }
      Running& p = *dead;
      auto& rr = recovery[p.spec.region];
      const bool again =
          rr.restarts < settings.restart.max_restarts && !leader_finished(p.spec.region);
      rr.fault = faults.fault(seconds_since(t0), p.spec.name, "worker", p.spec.region,
                              describe_status(st), again, again ? rr.restarts + 1 : rr.restarts);
      if (!again) {
        failure = failure_message(p, st);
        if (settings.restart.enabled())
          failure = fmt::format("run.restart.max_restarts = {} used up: {}",
                                settings.restart.max_restarts, failure);
        return;
      }
      ++rr.restarts;
      spdlog::warn(
          "run: {} {} at {:.1f} s; restarting the workers of {} from their snapshots in {} s "
          "(restart {} of {})",
          p.spec.name, describe_status(st), seconds_since(t0), p.spec.region,
          settings.restart.backoff_s, rr.restarts, settings.restart.max_restarts);
      kill_region_workers(fleet.procs(), p.spec.region);
      rr.rounds_at_death = rr.last_round;
      rr.phase = RegionRecovery::Phase::backoff;
      rr.backoff_until = Clock::now() + seconds(settings.restart.backoff_s);
    };
    const auto restart_region_when_due = [&](const std::string& region, RegionRecovery& rr) {
      if (rr.phase != RegionRecovery::Phase::backoff || Clock::now() < rr.backoff_until) return;
      for (auto& p : fleet.procs())
        if (p->spec.role == ProcessRole::worker && p->spec.region == region) {
          p->restarts = rr.restarts;
          fleet.restart(*p, resume_args(rr.restarts));
        }
      rr.phase = RegionRecovery::Phase::resuming;
    };
    // A leader's metrics line: its `resume` ends a restart, its next round the recovery.
    const auto on_worker_event = [&](const nlohmann::json& e) {
      if (!e.is_object() || !e.contains("region") || !e["region"].is_string()) return;
      if (e.value("rank", 0) != 0) return;
      const auto kind = e.value("event", std::string());
      auto& rr = recovery[e["region"].get<std::string>()];
      const uint64_t round =
          e.contains("round") && e["round"].is_number_unsigned() ? e["round"].get<uint64_t>() : 0;
      if (kind == "resume" && rr.phase == RegionRecovery::Phase::resuming) {
        std::optional<uint64_t> snapshot;
        if (e.contains("checkpoint_round") && e["checkpoint_round"].is_number_unsigned())
          snapshot = e["checkpoint_round"].get<uint64_t>();
        int pid = 0;
        for (auto& p : fleet.procs())
          if (p->spec.role == ProcessRole::worker && p->spec.region == e["region"] &&
              p->spec.rank == 0)
            pid = p->child.pid();
        faults.restarted(rr.fault, seconds_since(t0), pid, snapshot);
        spdlog::warn("run: {}", describe_fault(faults.faults()[rr.fault]));
        rr.resumed_at = round;
        rr.phase = RegionRecovery::Phase::recovering;
      } else if (kind == "round" && e.value("steps", 0) > 0) {
        rr.last_round = round;
        if (rr.phase == RegionRecovery::Phase::recovering && round >= rr.resumed_at) {
          // Rounds the region had finished before the death and trains again.
          const uint64_t redone =
              rr.rounds_at_death + 1 > rr.resumed_at ? rr.rounds_at_death + 1 - rr.resumed_at : 0;
          faults.recovered(rr.fault, seconds_since(t0), redone);
          spdlog::info("run: {}", describe_fault(faults.faults()[rr.fault]));
          rr.phase = RegionRecovery::Phase::running;
        }
      }
    };
    const auto supervise = [&](Running& p, std::optional<int> st) {
      using Phase = Running::Phase;
      if (st && p.phase != Phase::backoff) return on_death(p, *st);
      switch (p.phase) {
        case Phase::running:
          return;
        case Phase::backoff:
          if (Clock::now() < p.phase_until) return;
          if (p.spec.role == ProcessRole::server) {
            p.metrics.emplace(run_dir / fmt::format("server-{}.metrics.jsonl", p.spec.region));
            p.metrics->read_new();  // the dead process's lines
          }
          fleet.restart(p);
          p.phase = Phase::starting;
          p.phase_until = Clock::now() + seconds(settings.startup_timeout_s);
          return;
        case Phase::starting: {
          bool up = true;
          for (auto port : p.spec.health_ports) up = up && port_accepts("127.0.0.1", port);
          if (!up) {
            if (Clock::now() > p.phase_until)
              failure = fmt::format(
                  "{} did not accept connections within run.startup_timeout_s = {} s of its "
                  "restart; last lines of {}:\n{}",
                  p.spec.name, settings.startup_timeout_s, p.log.string(), tail_lines(p.log, 20));
            return;
          }
          const auto restored = p.metrics ? restored_round(*p.metrics) : std::nullopt;
          faults.restarted(p.fault, seconds_since(t0), p.child.pid(), restored);
          spdlog::warn("run: {}", describe_fault(faults.faults()[p.fault]));
          for (const auto& r : settings.regions) {
            auto it = monitor.regions().find(r);
            p.rounds_at_up[r] = it == monitor.regions().end() ? 0 : it->second.rounds_done;
          }
          p.phase = Phase::resuming;
          return;
        }
        case Phase::resuming:
          for (const auto& r : settings.regions) {
            auto it = monitor.regions().find(r);
            if (it == monitor.regions().end() || it->second.rounds_done <= p.rounds_at_up[r])
              return;
          }
          {
            std::optional<uint64_t> lost;
            if (p.spec.role == ProcessRole::server) {
              const auto restored = faults.faults()[p.fault].restored_round.value_or(0);
              lost = p.rounds_at_death > restored ? p.rounds_at_death - restored : 0;
            }
            faults.recovered(p.fault, seconds_since(t0), lost);
          }
          spdlog::info("run: {}", describe_fault(faults.faults()[p.fault]));
          p.phase = Phase::running;
          return;
      }
    };
    while (failure.empty()) {
      bool workers_left = false;
      for (auto& p : fleet.procs()) {
        auto st = p->child.poll();
        if (p->spec.role == ProcessRole::worker) {
          if (!st) {
            workers_left = true;
          } else if (*st != 0 && failure.empty() &&
                     recovery[p->spec.region].phase != RegionRecovery::Phase::backoff) {
            on_worker_death(*p, *st);  // fails the run unless run.restart restarts the region
          }
        } else if (failure.empty()) {
          supervise(*p, st);
        }
      }
      for (auto& [region, rr] : recovery) {
        if (failure.empty()) restart_region_when_due(region, rr);
        workers_left = workers_left || rr.down();  // its workers are (being) restarted
      }
      for (auto& t : tails)
        for (const auto& e : t.read_new()) {
          monitor.add(e);
          on_worker_event(e);
        }
      if (settings.external_workers)
        workers_left = external_leaders_left(monitor, settings.regions);
      if (Clock::now() >= next_show || !workers_left || !failure.empty()) {
        display.show(monitor, settings.regions, seconds_since(t0), fault_notes());
        next_show = Clock::now() + seconds(refresh);
      }
      if (!failure.empty() || !workers_left) break;
      if (stop.stop_requested()) {
        failure = "interrupted";
        break;
      }
      if (settings.timeout_s > 0 && seconds_since(t0) > settings.timeout_s) {
        failure = fmt::format("timed out after run.timeout_s = {} s", settings.timeout_s);
        status = "timed out";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    display.finish();
    if (failure == "interrupted")
      status = "interrupted";
    else if (!failure.empty() && status == "completed")
      status = "failed";
    if (!failure.empty() && status == "failed") spdlog::error("run: {}", failure);
    if (status == "interrupted")
      spdlog::warn("run: interrupted; stopping every process, keeping partial results");
    fleet.stop_all();  // workers first, then servers and netsim
  }
  const double wall = seconds_since(t0);

  make_plots(o, run_dir);
  SummaryInputs in;
  in.target_accuracy = settings.target_accuracy;
  in.target_val_bpb = settings.target_val_bpb;
  in.wall_seconds = wall;
  in.status = status;
  if (status != "completed") in.failure = failure.substr(0, failure.find('\n'));
  const auto s = write_summary_and_report(run_dir, in);

  const std::string line = outcome_line(run_dir.filename().string(), s);
  std::fprintf(o.progress, "%s\nreport: %s\n", line.c_str(),
               (run_dir / "report.md").string().c_str());
  result.status = status;
  result.exit_code = status == "completed"     ? 0
                     : status == "interrupted" ? 130
                     : status == "timed out"   ? 124
                                               : 1;
  return result;
}

}  // namespace geotrain::launcher
