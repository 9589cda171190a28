#include "launcher/run/launcher.hpp"

#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "launcher/report/fault_log.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_report.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/deployment.hpp"
#include "launcher/run/fleet.hpp"
#include "launcher/run/progress_display.hpp"
#include "launcher/run/resume.hpp"
#include "launcher/run/run_folder.hpp"
#include "launcher/run/supervisor.hpp"
#include "wire/curve_keys.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;

namespace {
// The progress display lists this many of the newest faults (events.jsonl has them all).
constexpr size_t kFaultLinesShown = 6;

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

// Waits until every port of `p` accepts connections. Returns "" when up, else why not.
std::string wait_healthy(Running& p, Clock::time_point deadline, const std::stop_token& stop) {
  for (;;) {
    if (auto st = p.child.poll()) return failure_message(p, *st);
    if (ports_listening(p.spec.health_ports, p.child.pid())) return "";
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

// Plots unless `--no-plots` (no script) or the config's `run.plots: false` says otherwise.
void make_plots(const LaunchOptions& o, const RunSettings& s, const fs::path& run_dir) {
  if (o.plot_script.empty() || !s.plots) return;
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
// What a run needs before its processes start: the settings, the run folder and the plan of
// processes (config.yaml and netsim.yaml written into the folder, CURVE keys generated).
struct PreparedRun {
  RunSettings settings;
  fs::path run_dir;
  Deployment plan;
  // The plan's ports, reserved in this process for the run's life (another deployment of this
  // process, `geotrain sweep --jobs`, gets others).
  std::unique_ptr<PortAllocator> ports;
};

PreparedRun prepare_run(const LaunchOptions& o) {
  // --resume: the stopped run's own config and folder (launcher/run/resume.hpp).
  const fs::path config_file = o.resume ? *o.resume / "config.yaml" : o.config;
  const auto source = describe_source(config_file.string(), o.overrides);
  const std::string stopped_text = o.resume ? resume_config_text(*o.resume) : "";
  // Refused here, before the folder is touched: a run with nothing to resume from would start
  // afresh and append a new run to the old run's files.
  const auto sources = o.resume ? find_resume_sources(*o.resume, stopped_text) : ResumeSources{};
  const auto text =
      apply_overrides(o.resume ? stopped_text : read_text_file(config_file), o.overrides, source);
  PreparedRun r;
  r.settings = parse_run_settings(text, source, config_file.parent_path(),
                                  config_file.stem().string(), o.project_configs);
  if (o.out_dir) r.settings.out_dir = *o.out_dir;
  if (o.validate) o.validate(text, source);

  r.run_dir = o.resume ? *o.resume
                       : create_run_folder(r.settings.out_dir, r.settings.name,
                                           std::chrono::system_clock::now());
  if (o.resume && sources.complete())
    spdlog::info("run: resuming {}: {}", r.run_dir.string(), sources.describe());
  else if (o.resume)
    spdlog::warn("run: resuming {}, in part: {}", r.run_dir.string(), sources.describe());
  {
    r.ports = std::make_unique<PortAllocator>(r.settings.base_port);
    r.plan = plan_deployment(text, source, r.settings, r.run_dir, *r.ports);
    if (r.plan.keys_to_generate) {
      wire::KeyDirectory::generate(*r.plan.keys_to_generate, r.settings.regions,
                                   /*force=*/false);
      spdlog::info("run: CURVE keys generated in {}", r.plan.keys_to_generate->string());
    }
    write_text_file(r.run_dir / "config.yaml", r.plan.config_yaml);
    if (r.plan.netsim_yaml) write_text_file(r.run_dir / "netsim.yaml", *r.plan.netsim_yaml);
    if (o.validate) o.validate(r.plan.config_yaml, (r.run_dir / "config.yaml").string());
    r.ports->release();  // probe sockets closed: the children bind the ports now
  }
  spdlog::info("run: {} region(s) x {} worker(s), run folder {}", r.settings.regions.size(),
               r.settings.workers.text(), r.run_dir.string());
  if (!r.plan.metrics_ports.empty()) {  // server.metrics_port: where Prometheus scrapes
    std::string line;
    for (const auto& [region, port] : r.plan.metrics_ports)
      line += fmt::format(" {}=http://{}:{}/metrics", region, r.plan.host, port);
    spdlog::info("run: Prometheus metrics of the servers:{}", line);
  }
  return r;
}

// Starts the servers, together (each sets up its own shards: seconds for a large model), then
// netsim once they accept connections, then the workers once netsim does (or announces the
// endpoints to external leaders). Returns why it failed, empty when all started.
std::string start_processes(const LaunchOptions& o, const PreparedRun& r, Fleet& fleet,
                            Clock::time_point t0, std::stop_token stop) {
  const auto deadline = t0 + seconds(r.settings.startup_timeout_s);
  std::vector<Running*> servers;
  for (const auto& spec : r.plan.processes)
    if (spec.role == ProcessRole::server) servers.push_back(&fleet.start(spec));
  for (Running* server : servers)
    if (auto failure = wait_healthy(*server, deadline, stop); !failure.empty()) return failure;
  for (const auto& spec : r.plan.processes) {
    if (spec.role != ProcessRole::netsim) continue;
    auto failure = wait_healthy(fleet.start(spec), deadline, stop);
    if (!failure.empty()) return failure;
  }
  if (r.settings.external_workers) {
    announce_external_leaders(r.plan, r.settings, r.run_dir, seconds_since(t0));
    return {};
  }
  spdlog::info("run: servers{} up after {:.1f} s; starting {} worker(s)",
               r.plan.netsim_yaml ? " and netsim" : "", seconds_since(t0),
               r.settings.workers.total());
  for (auto spec : r.plan.processes)
    if (spec.role == ProcessRole::worker) {
      if (o.resume) spec.args.push_back("--resume");
      fleet.start(spec);
    }
  return {};
}

// How a run ended: "completed", "failed", "interrupted" or "timed out", and why when not
// completed.
struct RunEnd {
  std::string status = "completed";
  std::string failure;
};

// The workers' `metrics_endpoint` events (worker.metrics_port): one line once every worker has
// said where it serves, then a line for each that moves (a restart on port auto).
class WorkerEndpoints {
 public:
  explicit WorkerEndpoints(size_t workers) : workers_(workers) {}
  void add(const nlohmann::json& e) {
    if (e.value("event", std::string()) != "metrics_endpoint") return;
    const auto who = fmt::format("{}-{}", e.value("region", std::string()), e.value("rank", 0));
    const auto url = e.value("url", std::string());
    const bool moved = urls_.count(who) && urls_[who] != url;
    urls_[who] = url;
    if (printed_ && moved) spdlog::info("run: Prometheus metrics of worker {} now at {}", who, url);
    if (printed_ || urls_.size() < workers_) return;
    std::string line;
    for (const auto& [w, u] : urls_) line += fmt::format(" {}={}", w, u);
    spdlog::info("run: Prometheus metrics of the workers:{}", line);
    printed_ = true;
  }

 private:
  size_t workers_;
  std::map<std::string, std::string> urls_;
  bool printed_ = false;
};

// Follows the workers' metrics and the supervisor until the workers are done, one fails, the run
// times out or `stop` is requested; shows the progress.
RunEnd watch_run(const LaunchOptions& o, const PreparedRun& r, Fleet& fleet, FaultLog& faults,
                 Clock::time_point t0, std::stop_token stop) {
  const auto& settings = r.settings;
  RunMonitor monitor(settings.target());
  std::vector<JsonlTail> tails;
  for (const auto& spec : r.plan.processes)
    if (spec.role == ProcessRole::worker)
      tails.emplace_back(r.run_dir /
                         fmt::format("worker-{}-{}.metrics.jsonl", spec.region, spec.rank));
  if (settings.external_workers)  // the external leaders write the leader's metrics file
    for (const auto& region : settings.regions)
      tails.emplace_back(r.run_dir / fmt::format("worker-{}-0.metrics.jsonl", region));
  ProgressDisplay display(o.progress, o.redraw.value_or(::isatty(::fileno(o.progress)) == 1));
  // The faults `geotrain chaos` injects beside this launcher (stops and partitions, lines "by":
  // "chaos" in events.jsonl) show with the launcher's own.
  JsonlTail events_tail(r.run_dir / "events.jsonl");
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
  Supervisor supervisor(settings, r.run_dir, fleet, faults, monitor, t0);
  WorkerEndpoints endpoints(tails.size());
  RunEnd end;
  while (true) {
    bool workers_left = supervisor.poll();
    for (auto& t : tails)
      for (const auto& e : t.read_new()) {
        monitor.add(e);
        supervisor.on_worker_event(e);
        endpoints.add(e);
      }
    end.failure = supervisor.failure();
    if (settings.external_workers) workers_left = external_leaders_left(monitor, settings.regions);
    if (Clock::now() >= next_show || !workers_left || !end.failure.empty()) {
      display.show(monitor, settings.regions, seconds_since(t0), fault_notes());
      next_show = Clock::now() + seconds(refresh);
    }
    if (!end.failure.empty()) {
      end.status = "failed";
      break;
    }
    if (!workers_left) break;
    if (stop.stop_requested()) {
      end = {"interrupted", "interrupted"};
      break;
    }
    if (settings.timeout_s > 0 && seconds_since(t0) > settings.timeout_s) {
      end = {"timed out", fmt::format("timed out after run.timeout_s = {} s", settings.timeout_s)};
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  display.finish();
  return end;
}

}  // namespace

RunResult run_deployment(const LaunchOptions& o, std::stop_token stop) {
  const PreparedRun r = prepare_run(o);
  const auto& run_dir = r.run_dir;
  const auto t0 = Clock::now();
  RunEnd end;
  FaultLog faults(run_dir / "events.jsonl");
  {
    Fleet fleet(o.binary, run_dir, o.grace_s);
    fleet.record(&faults, t0);
    end.failure = start_processes(o, r, fleet, t0, stop);
    if (end.failure == "interrupted")
      end.status = "interrupted";
    else if (!end.failure.empty())
      end.status = "failed";
    else
      end = watch_run(o, r, fleet, faults, t0, stop);
    if (end.status == "failed") spdlog::error("run: {}", end.failure);
    if (end.status == "interrupted")
      spdlog::warn("run: interrupted; stopping every process, keeping partial results");
    fleet.stop_all();  // workers first, then servers and netsim
  }
  const double wall = seconds_since(t0);

  make_plots(o, r.settings, run_dir);
  SummaryInputs in;
  in.target_accuracy = r.settings.target_accuracy;
  in.target_val_bpb = r.settings.target_val_bpb;
  in.wall_seconds = wall;
  in.status = end.status;
  if (end.status != "completed") in.failure = end.failure.substr(0, end.failure.find('\n'));
  const auto s = write_summary_and_report(run_dir, in);

  const std::string line = outcome_line(run_dir.filename().string(), s);
  std::fprintf(o.progress, "%s\nreport: %s\n", line.c_str(),
               (run_dir / "report.md").string().c_str());
  RunResult result;
  result.run_dir = run_dir;
  result.status = end.status;
  result.exit_code = end.status == "completed"     ? 0
                     : end.status == "interrupted" ? 130
                     : end.status == "timed out"   ? 124
                                                   : 1;
  return result;
}

}  // namespace geotrain::launcher
