#include "launcher/launcher.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "launcher/child_process.hpp"
#include "launcher/deployment.hpp"
#include "launcher/jsonl_tail.hpp"
#include "launcher/progress_display.hpp"
#include "launcher/run_folder.hpp"
#include "launcher/run_summary.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
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
    return *procs_.back();
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
  std::vector<std::unique_ptr<Running>> procs_;
};

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
  auto settings = load_run_settings(o.config);
  if (o.out_dir) settings.out_dir = *o.out_dir;
  const auto text = read_text_file(o.config);
  if (o.validate) o.validate(text, o.config.string());

  RunResult result;
  result.run_dir =
      create_run_folder(settings.out_dir, settings.name, std::chrono::system_clock::now());
  const auto& run_dir = result.run_dir;
  Deployment plan;
  {
    PortAllocator ports(settings.base_port);
    plan = plan_deployment(text, o.config.string(), settings, run_dir, ports);
    write_text_file(run_dir / "config.yaml", plan.config_yaml);
    if (plan.netsim_yaml) write_text_file(run_dir / "netsim.yaml", *plan.netsim_yaml);
    if (o.validate) o.validate(plan.config_yaml, (run_dir / "config.yaml").string());
  }  // probe sockets closed: the children bind the ports now
  spdlog::info("run: {} region(s) x {} worker(s), run folder {}", settings.regions.size(),
               settings.workers_per_region, run_dir.string());

  const auto t0 = Clock::now();
  std::string failure;
  std::string status = "completed";
  {
    Fleet fleet(o.binary, run_dir, o.grace_s);
    // Servers and netsim, each healthy before the workers start.
    const auto deadline = t0 + seconds(settings.startup_timeout_s);
    for (const auto& spec : plan.processes) {
      if (spec.role == ProcessRole::worker) continue;
      failure = wait_healthy(fleet.start(spec), deadline, stop);
      if (!failure.empty()) break;
    }
    if (failure.empty()) {
      spdlog::info("run: servers{} up after {:.1f} s; starting {} worker(s)",
                   plan.netsim_yaml ? " and netsim" : "", seconds_since(t0),
                   settings.regions.size() * settings.workers_per_region);
      for (const auto& spec : plan.processes)
        if (spec.role == ProcessRole::worker) fleet.start(spec);
    }

    RunMonitor monitor(settings.target());
    std::vector<JsonlTail> tails;
    for (const auto& spec : plan.processes)
      if (spec.role == ProcessRole::worker)
        tails.emplace_back(run_dir /
                           fmt::format("worker-{}-{}.metrics.jsonl", spec.region, spec.rank));
    ProgressDisplay display(o.progress, o.redraw.value_or(::isatty(::fileno(o.progress)) == 1));
    const double refresh = display_refresh(o, settings);
    auto next_show = Clock::now();
    while (failure.empty()) {
      bool workers_left = false;
      for (auto& p : fleet.procs()) {
        auto st = p->child.poll();
        if (p->spec.role == ProcessRole::worker) {
          if (!st)
            workers_left = true;
          else if (*st != 0 && failure.empty())
            failure = failure_message(*p, *st);
        } else if (st && failure.empty()) {
          failure = failure_message(*p, *st);
        }
      }
      for (auto& t : tails)
        for (const auto& e : t.read_new()) monitor.add(e);
      if (Clock::now() >= next_show || !workers_left || !failure.empty()) {
        display.show(monitor, settings.regions, seconds_since(t0));
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
