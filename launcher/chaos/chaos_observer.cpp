#include "launcher/chaos/chaos_observer.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "core/log.hpp"
#include "launcher/chaos/rss_sampler.hpp"
#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

class RunObserver::State {
 public:
  // A process of the run, as events.jsonl tells it.
  struct Proc {
    int pid = 0;
    std::string kind;         // process_kind()
    std::string region;       // servers
    bool restarting = false;  // the launcher saw it die and has not seen it recover yet
  };

  State(fs::path out_parent, std::vector<std::string> regions, double window_s,
        std::vector<PlannedFault> faults, std::vector<std::string> kill_kinds, Clock::time_point t0,
        std::stop_source run_stop, bool finish_after_window)
      : finish_after_window_(finish_after_window),
        out_parent_(std::move(out_parent)),
        regions_(std::move(regions)),
        window_s_(window_s),
        faults_(std::move(faults)),
        kill_kinds_(std::move(kill_kinds)),
        t0_(t0),
        run_stop_(std::move(run_stop)),
        trained_(regions_) {}

  // Returns false once it has nothing more to do (the window ended, or the user stopped).
  bool tick(const std::stop_token& user_stop) {
    const double t = since(t0_);
    if (!events_ && !find_run_folder()) return !user_stop.stop_requested();
    read_events(t);
    read_progress(t);
    sample_memory(t);
    if (user_stop.stop_requested()) {
      end_faults(t);
      run_stop_.request_stop();
      return false;
    }
    if (seen_.window_end_s) return true;  // the run finishes its rounds, without faults
    if (ready_ && t >= *ready_ + window_s_) {
      end_faults(t);
      seen_.window_end_s = t;
      if (finish_after_window_) {
        spdlog::info(
            "chaos: {} window of {:.0f} s over; no more faults, the run finishes its "
            "rounds",
            faults_.empty() ? "reference" : "chaos", window_s_);
        return true;
      }
      spdlog::info("chaos: {} window of {:.0f} s over; stopping the run",
                   faults_.empty() ? "reference" : "chaos", window_s_);
      run_stop_.request_stop();
      return false;
    }
    partitions(t);
    inject(t);
    return true;
  }

  // After the run: faults still open are left without a recovery time.
  ObservedRun finish() {
    for (const auto& f : faults_)
      if (f.at_s < (ready_ ? *ready_ + window_s_ : 0)) ++seen_.planned_in_window;
    seen_.memory = memory_.report(std::min(kLongestSettle, window_s_ / 6));
    seen_.rounds_trained = trained_.trained();
    return seen_;
  }

 private:
  // A stop or partition the harness logs itself (kills are the launcher's to log).
  struct Open {
    size_t injected = 0;  // index in seen_.injected
    std::string process;  // "server-eu-west", "us-east->eu-west"
    double at_s = 0;      // harness clock
    double until_s = 0;   // SIGCONT / the link heals
    int pid = 0;          // stop
    bool ended = false;
    std::map<std::string, uint64_t> rounds_at_end;
  };

  double launcher_time(double t) const { return t - offset_.value_or(0); }

  void sample_memory(double t) {
    if (t < next_sample_) return;
    next_sample_ = t + kSampleEvery;
    for (const auto& [name, p] : procs_)
      if (p.pid > 0) memory_.sample(t, p.pid, name, p.kind);
  }

  bool find_run_folder() {
    if (!fs::is_directory(out_parent_)) return false;
    for (const auto& e : fs::directory_iterator(out_parent_)) {
      if (!e.is_directory()) continue;
      seen_.run_dir = e.path();
      events_.emplace(e.path() / "events.jsonl");
      for (const auto& r : regions_)
        leaders_.emplace_back(r, JsonlTail(e.path() / fmt::format("worker-{}-0.metrics.jsonl", r)));
      return true;
    }
    return false;
  }

  void write(json e) {
    if (!out_.is_open()) out_.open(seen_.run_dir / "events.jsonl", std::ios::app);
    e["by"] = "chaos";
    out_ << e.dump() << '\n';
    out_.flush();
  }

  void read_events(double t) {
    for (const auto& e : events_->read_new()) {
      if (e.contains("by")) continue;  // ours
      const auto kind = e.value("event", std::string());
      const auto name = e.value("process", std::string());
      if (kind == "start") {
        if (!offset_ && e.contains("time") && e["time"].is_number())
          offset_ = t - e["time"].get<double>();
        auto& p = procs_[name];
        p.pid = e.value("pid", 0);
        p.kind = process_kind(name);
        if (p.kind == "server") p.region = name.substr(std::string("server-").size());
      } else if (kind == "fault") {
        if (e.value("action", "") == "fail") seen_.launcher_gave_up = true;
        procs_[name].restarting = true;
      } else if (kind == "restarted" && killing_ && killing_->process == name) {
        seen_.injected[killing_->injected]["restart_s"] = e.value("restart_s", 0.0);
      } else if (kind == "recovered") {
        procs_[name].restarting = false;
        if (killing_ && killing_->process == name) {
          seen_.injected[killing_->injected]["recovery_s"] = e.value("recovery_s", 0.0);
          if (e.contains("rounds_lost"))
            seen_.injected[killing_->injected]["rounds_lost"] = e["rounds_lost"];
          killing_.reset();
        }
      }
    }
  }

  void read_progress(double t) {
    bool changed = false;
    for (auto& [region, tail] : leaders_)
      for (const auto& e : tail.read_new())
        if (e.value("event", "") == "round" && e.value("steps", 1.0) > 0 && e.contains("round") &&
            e["round"].is_number())
          changed |= trained_.finished(region, e["round"].get<uint64_t>());
    if (!changed) return;
    const auto fewest = trained_.fewest();
    seen_.timeline.push_back({t, fewest});
    if (!ready_ && fewest >= 1) {
      ready_ = t;
      spdlog::info(
          "chaos: every region finished a round {:.1f} s after the start; measuring for "
          "{:.0f} s",
          t, window_s_);
    }
  }

  // Every region finished a round after those counted in `at_end`.
  bool all_moved_on(const std::map<std::string, uint64_t>& at_end) const {
    for (const auto& r : regions_) {
      auto now = trained_.trained().find(r);
      auto then = at_end.find(r);
      if (now == trained_.trained().end() || (then != at_end.end() && now->second <= then->second))
        return false;
    }
    return true;
  }

  // An open stop or partition whose end has come is closed; once every region moved on, it has
  // recovered.
  void settle(Open& o, double t) {
    if (!o.ended && t >= o.until_s) {
      o.ended = true;
      o.rounds_at_end = trained_.trained();
      if (o.pid > 0) {
        ::kill(o.pid, SIGCONT);
        write({{"time", launcher_time(t)},
               {"event", "resume"},
               {"process", o.process},
               {"pid", o.pid},
               {"signal", "SIGCONT"}});
      } else {
        write({{"time", launcher_time(t)}, {"event", "heal"}, {"process", o.process}});
      }
    }
    if (o.ended && all_moved_on(o.rounds_at_end)) {
      const double recovery = t - o.at_s;
      write({{"time", launcher_time(t)},
             {"event", "recovered"},
             {"process", o.process},
             {"restart", 0},
             {"recovery_s", recovery}});
      seen_.injected[o.injected]["recovery_s"] = recovery;
      o.injected = SIZE_MAX;
    }
  }

  // Partitions happen in netsim on their own schedule; here they are logged and followed.
  void partitions(double t) {
    for (size_t i = 0; i < faults_.size(); ++i) {
      const auto& f = faults_[i];
      if (f.fault != ChaosFault::partition || logged_.count(i) || t < f.at_s) continue;
      logged_.insert(i);
      Open o;
      o.process = f.from + "->" + f.to;
      o.at_s = t;
      o.until_s = f.at_s + f.length_s;
      o.injected = record(t, f, o.process, 0);
      write({{"time", launcher_time(t)},
             {"event", "inject"},
             {"fault", "partition"},
             {"process", o.process},
             {"length_s", f.length_s}});
      write({{"time", launcher_time(t)},
             {"event", "fault"},
             {"process", o.process},
             {"role", "link"},
             {"region", f.from},
             {"status", fmt::format("partitioned for {:.0f} s", f.length_s)},
             {"restart", 0},
             {"action", "wait"}});
      spdlog::warn("chaos: link {} partitioned for {:.0f} s", o.process, f.length_s);
      open_.push_back(std::move(o));
    }
    for (auto& o : open_) settle(o, t);
    std::erase_if(open_, [](const Open& o) { return o.injected == SIZE_MAX; });
  }

  size_t record(double t, const PlannedFault& f, const std::string& target, int pid) {
    json j{{"at_s", launcher_time(t)},
           {"planned_at_s", f.at_s},
           {"fault", to_string(f.fault)},
           {"process", target},
           {"recovery_s", nullptr}};
    if (pid > 0) j["pid"] = pid;
    if (f.length_s > 0) j["length_s"] = f.length_s;
    seen_.injected.push_back(j);
    ++seen_.count[to_string(f.fault)];
    return seen_.injected.size() - 1;
  }

  bool busy() const {
    if (killing_ || !open_.empty()) return true;
    for (const auto& [_, p] : procs_)
      if (p.restarting) return true;
    return false;
  }

  void inject(double t) {
    if (!ready_ || seen_.launcher_gave_up) return;
    while (next_ < faults_.size() && faults_[next_].fault == ChaosFault::partition) ++next_;
    if (next_ >= faults_.size() || t < faults_[next_].at_s || busy()) return;
    const auto& f = faults_[next_++];
    std::vector<std::pair<std::string, const Proc*>> candidates;
    for (const auto& [name, p] : procs_) {
      const bool fits =
          f.fault == ChaosFault::stop
              ? p.kind == "server"
              : std::find(kill_kinds_.begin(), kill_kinds_.end(), p.kind) != kill_kinds_.end();
      if (fits && p.pid > 0) candidates.emplace_back(name, &p);
    }
    if (candidates.empty()) {
      spdlog::warn("chaos: no process to {} at {:.1f} s", to_string(f.fault), t);
      return;
    }
    const auto& [name, p] = candidates[f.pick % candidates.size()];
    const int pid = p->pid;
    if (f.fault == ChaosFault::kill) {
      const auto i = record(t, f, name, pid);
      write({{"time", launcher_time(t)},
             {"event", "inject"},
             {"fault", "kill"},
             {"process", name},
             {"pid", pid},
             {"signal", "SIGKILL"}});
      spdlog::warn("chaos: SIGKILL to {} (pid {}) at {:.1f} s", name, pid, t);
      ::kill(pid, SIGKILL);
      killing_ = Open{i, name, t, t, pid, true, {}};
      return;
    }
    Open o;
    o.process = name;
    o.at_s = t;
    o.until_s = t + f.length_s;
    o.pid = pid;
    o.injected = record(t, f, name, pid);
    write({{"time", launcher_time(t)},
           {"event", "inject"},
           {"fault", "stop"},
           {"process", name},
           {"pid", pid},
           {"signal", "SIGSTOP"},
           {"length_s", f.length_s}});
    write({{"time", launcher_time(t)},
           {"event", "fault"},
           {"process", name},
           {"role", p->kind},
           {"region", p->region.empty() ? json(nullptr) : json(p->region)},
           {"status", fmt::format("stopped (SIGSTOP) for {:.0f} s", f.length_s)},
           {"restart", 0},
           {"action", "wait"}});
    spdlog::warn("chaos: SIGSTOP to {} (pid {}) for {:.0f} s at {:.1f} s", name, pid, f.length_s,
                 t);
    ::kill(pid, SIGSTOP);
    open_.push_back(std::move(o));
  }

  // The window is over (or the user stopped): a stopped process gets its SIGCONT now.
  void end_faults(double t) {
    for (auto& o : open_)
      if (o.pid > 0 && !o.ended) {
        o.until_s = t;
        settle(o, t);
      }
  }

  // Memory: sampled every kSampleEvery s; the early span starts at most kLongestSettle s in.
  static constexpr double kSampleEvery = 5;
  static constexpr double kLongestSettle = 600;

  bool finish_after_window_;
  fs::path out_parent_;
  std::vector<std::string> regions_;
  double window_s_;
  std::vector<PlannedFault> faults_;
  std::vector<std::string> kill_kinds_;
  Clock::time_point t0_;
  std::stop_source run_stop_;

  std::optional<JsonlTail> events_;
  std::vector<std::pair<std::string, JsonlTail>> leaders_;
  std::ofstream out_;
  std::optional<double> offset_;  // harness clock - launcher clock
  std::map<std::string, Proc> procs_;
  TrainedRounds trained_;
  std::optional<double> ready_;
  size_t next_ = 0;              // next kill or stop in faults_
  std::set<size_t> logged_;      // partitions logged
  std::vector<Open> open_;       // stops and partitions not recovered yet
  std::optional<Open> killing_;  // a kill the launcher has not recovered from yet
  ObservedRun seen_;
  RssSampler memory_;
  double next_sample_ = 0;
};

RunObserver::RunObserver(fs::path out_parent, std::vector<std::string> regions, double window_s,
                         std::vector<PlannedFault> faults, std::vector<std::string> kill_kinds,
                         Clock::time_point t0, std::stop_source run_stop, bool finish_after_window)
    : state_(std::make_unique<State>(std::move(out_parent), std::move(regions), window_s,
                                     std::move(faults), std::move(kill_kinds), t0,
                                     std::move(run_stop), finish_after_window)) {}
RunObserver::~RunObserver() = default;
bool RunObserver::tick(const std::stop_token& user_stop) { return state_->tick(user_stop); }
ObservedRun RunObserver::finish() { return state_->finish(); }

}  // namespace geotrain::launcher
