// Worker recovery end to end with real processes (docs/run.md, "Recovery"): a run stopped and
// resumed with `geotrain run --resume` ends bit-identical to one never stopped (synchronous,
// fp32 codecs, worker and server checkpoints every round); under run.restart a leader killed
// with SIGKILL, and a non-leader worker killed with SIGKILL, are restarted with their region's
// whole worker group from its snapshots and the run completes, with the fault in summary.json
// and events.jsonl; with worker.elastic (the default on the CPU) a non-leader killed so costs
// only itself: the others go on, and it rejoins with the leader's state. A small MLP on
// Fashion-MNIST, 8 rounds of 4 steps; each run takes a few seconds on 2 loaded cores.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/run/deployment.hpp"
#include "launcher/run/port_allocator.hpp"
#include "launcher/run/resume.hpp"
#include "launcher/run/run_settings.hpp"
#include "tests/launcher/run_in_background.hpp"
#include "tests/temp_dir.hpp"

extern char** environ;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using geotrain::test::pid_of;
using geotrain::test::run_folder;

// `geotrain ARGS...` as a child process with its output in a file, so that a test can signal it.
class Launched {
 public:
  Launched(const std::vector<std::string>& args, const fs::path& output) : output_(output) {
    std::vector<std::string> argv_s{GEOTRAIN_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Launched() {
    if (pid_ > 0 && !code_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  pid_t pid() const { return pid_; }
  int wait() {
    if (!code_) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return *code_;
  }
  std::string output() const {
    std::ifstream f(output_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

 private:
  fs::path output_;
  pid_t pid_ = -1;
  std::optional<int> code_;
};

// The newest round the leader of `region` finished.
uint64_t last_round(const fs::path& run, const std::string& region) {
  uint64_t n = 0;
  for (const auto& e :
       geotrain::launcher::read_jsonl(run / ("worker-" + region + "-0.metrics.jsonl")))
    if (e.value("event", "") == "round" && e.value("steps", 0) > 0) n = e.value("round", 0);
  return n;
}

std::string read_bytes(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

json summary_of(const fs::path& run) {
  std::ifstream f(run / "summary.json");
  return json::parse(f);
}

// Synchronous (every tensor critical: a non-critical push is applied on arrival, so two runs
// may add the regions' deltas in another order), fp32 both ways, SGD with momentum: any state
// lost or replayed shows in the final parameters. Checkpoints of servers and workers every
// round.
std::string config_text(const std::string& regions, uint32_t per_region, const std::string& extra) {
  return "regions: " + regions +
         "\n"
         "model: {arch: \"784-32-10\", critical: [\"*\"]}\n"
         "server: {staleness_bound: 0, dead_after_ms: 30000, checkpoint: {every: 1}}\n"
         "worker: {workers_per_region: " +
         std::to_string(per_region) +
         ", batch_size: 32, local_steps: 4, rounds: 8, lr: 0.05,\n"
         "         critical_codec: fp32, noncritical_codec: fp32, eval_every: 0,\n"
         "         checkpoint: {every: 1}, step_delay_ms: {us-east: 60" +
         (regions == "[us-east]" ? std::string() : std::string(", eu-west: 60")) +
         "}}\n"
         "security: {curve: false}\n"
         "run: {name: recover, wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/lan.yaml, plots: false, timeout_s: 120" +
         extra + "}\n";
}
const std::string kTwoRegions = "[us-east, eu-west]";

// `text` with more keys in its worker section.
std::string with_worker_keys(std::string text, const std::string& keys) {
  text.replace(text.find("worker: {"), 9, "worker: {" + keys + ", ");
  return text;
}

// One run to its end; returns its folder.
fs::path run_to_end(const fs::path& dir, const std::string& text) {
  const auto config = dir / "config.yaml";
  std::ofstream(config) << text;
  Launched run({"run", config.string(), "--out", (dir / "runs").string(), "--no-plots"},
               dir / "out.txt");
  const int code = run.wait();
  INFO(run.output());
  REQUIRE(code == 0);
  auto folder = run_folder(dir / "runs");
  REQUIRE(folder.has_value());
  return *folder;
}

// Starts a run, calls `act(folder)` every 50 ms until it returns true, and waits for the end.
template <typename Act>
std::pair<fs::path, int> run_with(const fs::path& dir, const std::string& text, Act act,
                                  std::string* output = nullptr) {
  const auto config = dir / "config.yaml";
  std::ofstream(config) << text;
  Launched run({"run", config.string(), "--out", (dir / "runs").string(), "--no-plots"},
               dir / "out.txt");
  std::optional<fs::path> folder;
  bool acted = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(100);
  while (!acted && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!folder) folder = run_folder(dir / "runs");
    if (folder) acted = act(*folder, run.pid());
  }
  const int code = run.wait();
  if (output) *output = run.output();
  INFO(run.output());
  REQUIRE(acted);
  REQUIRE(folder.has_value());
  return {*folder, code};
}

// The uninterrupted baseline, computed once.
const fs::path& baseline() {
  static geotrain::test::TempDir tmp("recover-baseline");
  static const fs::path folder = run_to_end(tmp.path(), config_text(kTwoRegions, 1, ""));
  return folder;
}

void check_same_parameters(const fs::path& a, const fs::path& b) {
  for (const std::string region : {"us-east", "eu-west"}) {
    const auto pa = read_bytes(a / ("params-" + region + ".f32"));
    const auto pb = read_bytes(b / ("params-" + region + ".f32"));
    REQUIRE(pa.size() == (784 * 32 + 32 + 32 * 10 + 10) * sizeof(float));
    CHECK_MESSAGE(pa == pb, "the final parameters of " << region << " differ");
  }
}

}  // namespace

TEST_CASE(
    "a run stopped mid-way and resumed with --resume ends bit-identical to one never stopped") {
  const auto& base = baseline();
  CHECK(summary_of(base)["rounds"] == 8);

  geotrain::test::TempDir tmp("recover-resume");
  // Stop (SIGINT, as Ctrl-C) once both leaders finished round 3.
  auto [folder, code] = run_with(
      tmp.path(), config_text(kTwoRegions, 1, ""), [](const fs::path& run, pid_t launcher) {
        if (last_round(run, "us-east") < 3 || last_round(run, "eu-west") < 3) return false;
        ::kill(launcher, SIGINT);
        return true;
      });
  CHECK(code == 130);
  const uint64_t stopped_at = last_round(folder, "us-east");
  MESSAGE("stopped after round " << stopped_at);
  REQUIRE(stopped_at < 8);
  CHECK(fs::exists(folder / "worker-checkpoints" / "us-east-0"));
  CHECK(fs::exists(folder / "checkpoints" / "eu-west"));

  Launched resumed({"run", "--resume", folder.string(), "--no-plots"}, tmp.path() / "resume.txt");
  const int resumed_code = resumed.wait();
  INFO(resumed.output());
  REQUIRE(resumed_code == 0);
  // Each leader said where it resumed: right after its snapshot, residuals restored.
  bool seen = false;
  for (const auto& e : geotrain::launcher::read_jsonl(folder / "worker-us-east-0.metrics.jsonl"))
    if (e.value("event", "") == "resume") {
      seen = true;
      CHECK(e["round"].get<uint64_t>() == e["checkpoint_round"].get<uint64_t>() + 1);
      CHECK(e["residuals"] == "restored");
      CHECK(e["parameters_match_servers"] == true);
    }
  CHECK(seen);
  const auto s = summary_of(folder);
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == 8);
  check_same_parameters(base, folder);
}

TEST_CASE("a leader killed with SIGKILL is restarted from its snapshot and the run completes") {
  const auto& base = baseline();
  geotrain::test::TempDir tmp("recover-leader");
  std::string output;
  auto [folder, code] = run_with(
      tmp.path(), config_text(kTwoRegions, 1, ", restart: {max_restarts: 2, backoff_s: 0.2}"),
      [](const fs::path& run, pid_t) {
        // Once its round-3 snapshot is in (renamed into place whole): the round event comes
        // before the snapshot, so killing on the event alone may find round 2's the newest.
        if (last_round(run, "eu-west") < 3 ||
            !fs::exists(run / "worker-checkpoints" / "eu-west-0" / "ckpt-000000000003"))
          return false;
        const auto pid = pid_of(run, "worker-eu-west-0");
        return pid && ::kill(*pid, SIGKILL) == 0;
      },
      &output);
  INFO(output);
  CHECK(code == 0);
  const auto s = summary_of(folder);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == 8);
  CHECK(s["restarts"] == 1);
  REQUIRE(s["faults"].size() == 1);
  const auto& f = s["faults"][0];
  CHECK(f["process"] == "worker-eu-west-0");
  CHECK(f["role"] == "worker");
  CHECK(f["status"] == "killed by SIGKILL");
  CHECK(f["restarted"] == true);
  REQUIRE(f["restored_round"].is_number());
  CHECK(f["restored_round"].get<int>() >= 3);
  CHECK(f["recovery_seconds"].get<double>() >= f["restart_seconds"].get<double>());
  CHECK(f["rounds_lost"].get<int>() == 0);
  // Killed between rounds or mid-round, the region resumes right after its snapshot (the
  // servers cannot release a round without it): the run is the uninterrupted one, exactly.
  json resume;
  for (const auto& e : geotrain::launcher::read_jsonl(folder / "worker-eu-west-0.metrics.jsonl"))
    if (e.value("event", "") == "resume") resume = e;
  REQUIRE(resume.is_object());
  MESSAGE("leader resumed: " << resume.dump());
  if (resume["stale_rounds"] == 0)
    check_same_parameters(base, folder);
  else  // killed after its push was released, before its snapshot: optimizer one round old
    CHECK(s["final_test_accuracy"].get<double>() > 0.5);
}

namespace {

// Whether to kill now, the run's folder given.
using KillWhen = std::function<bool(const fs::path&)>;

// After the leader's round 3.
bool after_round_3(const fs::path& run) { return last_round(run, "us-east") >= 3; }

// A region of three workers (elastic, the default) whose worker `rank` is killed with SIGKILL
// once `when` says so (after round 3 of `rounds`), the config's worker section given more
// `worker_keys`; the run must complete with that one fault, the process restarted.
std::pair<fs::path, json> kill_in_elastic_region(const fs::path& dir, uint32_t rank,
                                                 uint32_t rounds,
                                                 const std::string& worker_keys = "",
                                                 const KillWhen& when = after_round_3) {
  std::string output;
  auto text = config_text("[us-east]", 3, ", restart: {max_restarts: 2, backoff_s: 0.2}");
  text.replace(text.find("rounds: 8"), 9, fmt::format("rounds: {}", rounds));
  if (!worker_keys.empty()) text = with_worker_keys(text, worker_keys);
  const std::string victim = fmt::format("worker-us-east-{}", rank);
  auto [folder, code] = run_with(
      dir, text,
      [&](const fs::path& run, pid_t) {
        if (!when(run)) return false;
        const auto pid = pid_of(run, victim);
        return pid && ::kill(*pid, SIGKILL) == 0;
      },
      &output);
  INFO(output);
  CHECK(code == 0);
  auto s = summary_of(folder);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == rounds);
  CHECK(s["global_model_identical"] == true);
  REQUIRE(s["faults"].size() == 1);
  CHECK(s["faults"][0]["process"] == victim);
  CHECK(s["faults"][0]["restarted"] == true);
  // Only the dead worker was started again: the others trained on, or waited for their leader.
  int restarted = 0;
  for (const auto& e : geotrain::launcher::read_jsonl(folder / "events.jsonl"))
    if (e.value("event", "") == "start" && e.value("restart", 0) == 1) {
      ++restarted;
      CHECK(e.value("process", "") == victim);
    }
  CHECK(restarted == 1);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
  return {folder, s};
}

// The events `name` of one worker's metrics.
std::vector<json> events_of(const fs::path& run, const std::string& worker,
                            const std::string& name) {
  std::vector<json> out;
  for (const auto& e :
       geotrain::launcher::read_jsonl(run / ("worker-" + worker + ".metrics.jsonl")))
    if (e.value("event", "") == name) out.push_back(e);
  return out;
}

// Worker `other`'s state after `round` (parameters, momentum) is the leader's, bit for bit, as
// every rank's is in data-parallel training (the leader's snapshot has its residuals too).
void check_same_state_as_leader(const fs::path& run, const std::string& other, uint64_t round) {
  const auto folder = [&](const std::string& worker) {
    return run / "worker-checkpoints" / worker / fmt::format("ckpt-{:012}", round);
  };
  const auto manifest = json::parse(read_bytes(folder(other) / "manifest.json"));
  size_t floats = 0;
  for (const auto& section : manifest["sections"]) floats += section["count"].get<size_t>();
  const auto own = read_bytes(folder(other) / "state.bin");
  const auto leaders = read_bytes(folder("us-east-0") / "state.bin");
  REQUIRE(own.size() == 16 + floats * sizeof(float));
  REQUIRE(leaders.size() >= own.size());
  CHECK_MESSAGE(leaders.compare(0, own.size(), own) == 0,
                other << "'s state after round " << round << " differs from its leader's");
}

}  // namespace

TEST_CASE(
    "a non-leader worker killed with SIGKILL: the others go on without it, and it rejoins with "
    "the leader's state") {
  geotrain::test::TempDir tmp("recover-elastic");
  // 30 rounds: time for the restarted one to come back while the region trains.
  const auto [folder, s] = kill_in_elastic_region(tmp.path(), 1, 30);
  const auto& f = s["faults"][0];
  CHECK(f["rounds_lost"].get<int>() == 0);
  // The region trained again (its group re-formed) before the worker was back.
  CHECK(f["recovery_seconds"].get<double>() < f["restart_seconds"].get<double>());
  // The leader re-formed its group without rank 1, within a second, then took it back.
  const auto regroups = events_of(folder, "us-east-0", "regroup");
  REQUIRE(regroups.size() == 2);
  CHECK(regroups[0]["lost"] == json::array({1}));
  CHECK(regroups[0]["members"] == json::array({0, 2}));
  CHECK(regroups[0]["seconds"].get<double>() < 1.0);
  CHECK(regroups[1]["joined"] == json::array({1}));
  CHECK(regroups[1]["members"] == json::array({0, 1, 2}));
  const auto rejoins = events_of(folder, "us-east-1", "rejoin");
  REQUIRE(rejoins.size() == 1);
  CHECK(rejoins[0]["round"] == regroups[1]["round"]);
  // From the leader, not from disk.
  check_same_state_as_leader(folder, "us-east-1", 30);
}

TEST_CASE(
    "a leader killed with SIGKILL while its workers live is started alone, takes the region's "
    "state from them, and leads them again") {
  geotrain::test::TempDir tmp("recover-lead-again");
  const auto [folder, s] = kill_in_elastic_region(tmp.path(), 0, 20);
  CHECK(events_of(folder, "us-east-0", "rejoin").size() == 1);
  // The others re-formed with it once and took its state: the same after the last round.
  for (const std::string worker : {"us-east-1", "us-east-2"}) {
    CHECK_MESSAGE(events_of(folder, worker, "regroup").size() == 1, worker);
    check_same_state_as_leader(folder, worker, 20);
  }
}

TEST_CASE(
    "under streaming fragments a worker killed with SIGKILL comes back in step with its region's "
    "merges and its servers' count of each fragment's rounds") {
  // Two fragments of the 4-step round: fragment 0 pushed after step 2 and merged after step 3,
  // fragment 1 pushed after step 4 and merged after the next round's first step. A rank that
  // expects a merge its leader does not broadcast, or the other way round, waits in another
  // collective until Gloo's timeout, and the run ends unfinished or re-forms once more.
  const std::string streaming = "overlap: eager, fragments: 2, fragment_delay: 1";
  uint32_t victim = 0;
  KillWhen when = after_round_3;
  SUBCASE("the leader, at a round's start: the last round's merge of fragment 1 died with it") {}
  SUBCASE("the leader, between the round's two pushes: its server holds fragment 0's only") {
    // Once the leader has begun round 4's third step (its push of fragment 0 is answered).
    when = [](const fs::path& run) {
      for (const auto& e : events_of(run, "us-east-0", "step"))
        if (e.value("round", 0) == 4 && e.value("step", 0) % 4 >= 2) return true;
      return false;
    };
  }
  SUBCASE("a non-leader: it joins at a round's start, where fragment 1's merge is due") {
    victim = 1;
  }
  CAPTURE(victim);
  geotrain::test::TempDir tmp("recover-fragments");
  const auto [folder, s] = kill_in_elastic_region(tmp.path(), victim, 12, streaming, when);
  const std::string dead = fmt::format("us-east-{}", victim);
  CHECK(events_of(folder, dead, "rejoin").size() == 1);
  // The others re-formed once without it (or, for a dead leader, with it) and once more with
  // it (a joining non-leader): no re-formation after a collective's timeout. The same state as
  // the leader's after the last round.
  for (const std::string worker : {"us-east-0", "us-east-1", "us-east-2"}) {
    if (worker == dead) continue;
    CHECK_MESSAGE(events_of(folder, worker, "regroup").size() == (victim == 0 ? 1u : 2u), worker);
    if (worker != "us-east-0") check_same_state_as_leader(folder, worker, 12);
  }
  if (victim != 0) check_same_state_as_leader(folder, dead, 12);
  CHECK(s["faults"][0]["recovery_seconds"].get<double>() < 10.0);
}

TEST_CASE(
    "without worker.elastic, a non-leader worker killed with SIGKILL restarts its region's group") {
  geotrain::test::TempDir tmp("recover-worker");
  std::string output;
  auto [folder, code] = run_with(
      tmp.path(),
      with_worker_keys(config_text("[us-east]", 2, ", restart: {max_restarts: 2, backoff_s: 0.2}"),
                       "elastic: false"),
      [](const fs::path& run, pid_t) {
        if (last_round(run, "us-east") < 3) return false;
        const auto pid = pid_of(run, "worker-us-east-1");
        return pid && ::kill(*pid, SIGKILL) == 0;
      },
      &output);
  INFO(output);
  CHECK(code == 0);
  const auto s = summary_of(folder);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == 8);
  CHECK(s["restarts"] == 1);
  REQUIRE(s["faults"].size() == 1);
  const auto& f = s["faults"][0];
  CHECK(f["process"] == "worker-us-east-1");
  CHECK(f["restarted"] == true);
  // Killed right after the leader's round 3, rank 1 may not have committed its snapshot of it
  // yet: the ranks then agree on round 2 (the newest both have).
  CHECK(f["restored_round"].get<int>() >= 2);
  CHECK(f["recovery_seconds"].is_number());
  // Both workers of the region were started again, with a new rendezvous generation.
  int restarted = 0;
  for (const auto& e : geotrain::launcher::read_jsonl(folder / "events.jsonl"))
    if (e.value("event", "") == "start" && e.value("restart", 0) == 1) ++restarted;
  CHECK(restarted == 2);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
}

TEST_CASE(
    "with worker.zero_stage 2 a region of two workers ends with the unsharded region's bits, "
    "snapshots its shards, and a worker killed with SIGKILL restarts the group from them") {
  geotrain::test::TempDir tmp("recover-zero");
  const auto one_region = [](const std::string& worker_keys, const std::string& run_keys) {
    return with_worker_keys(config_text("[us-east]", 2, run_keys), worker_keys);
  };
  fs::create_directories(tmp.path() / "plain");
  fs::create_directories(tmp.path() / "zero");
  const auto plain = run_to_end(tmp.path() / "plain", one_region("elastic: false", ""));
  const auto zero =
      run_to_end(tmp.path() / "zero", one_region("elastic: false, zero_stage: 2", ""));
  const auto final_params = [](const fs::path& run) {
    return read_bytes(run / "params-us-east.f32");
  };
  REQUIRE(final_params(plain).size() == (784 * 32 + 32 + 32 * 10 + 10) * sizeof(float));
  CHECK(final_params(zero) == final_params(plain));
  // Each worker's snapshot holds its half of the momentum.
  for (const std::string worker : {"us-east-0", "us-east-1"}) {
    const auto manifest = json::parse(read_bytes(zero / "worker-checkpoints" / worker /
                                                 fmt::format("ckpt-{:012}", 8) / "manifest.json"));
    int momentum_sections = 0;
    for (const auto& section : manifest["sections"])
      if (section["name"] == "optimizer.m") {
        ++momentum_sections;
        CHECK(section["count"] == 25450 / 2);
      }
    CHECK_MESSAGE(momentum_sections == 1, worker);
    // And its start event says so: the momentum's range, in bytes.
    const auto starts = events_of(zero, worker, "start");
    REQUIRE(starts.size() == 1);
    CHECK(starts[0]["zero_stage"] == 2);
    CHECK(starts[0]["optimizer_state_bytes"] == 25450 / 2 * sizeof(float));
  }
  CHECK(events_of(plain, "us-east-1", "start").at(0)["optimizer_state_bytes"] ==
        25450 * sizeof(float));
  fs::create_directories(tmp.path() / "killed");
  auto [folder, code] = run_with(
      tmp.path() / "killed",
      one_region("elastic: false, zero_stage: 2", ", restart: {max_restarts: 2, backoff_s: 0.2}"),
      [](const fs::path& run, pid_t) {
        if (last_round(run, "us-east") < 3) return false;
        const auto pid = pid_of(run, "worker-us-east-1");
        return pid && ::kill(*pid, SIGKILL) == 0;
      });
  CHECK(code == 0);
  const auto s = summary_of(folder);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == 8);
  REQUIRE(s["faults"].size() == 1);
  CHECK(s["faults"][0]["restarted"] == true);
  CHECK(s["faults"][0]["restored_round"].get<int>() >= 2);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
}

TEST_CASE("run.restart turns worker snapshots on unless the config sets them") {
  geotrain::test::TempDir tmp("recover-plan");
  const auto plan_with = [&](const std::string& text) {
    const auto settings = geotrain::launcher::parse_run_settings(text, "t.yaml", ".", "t");
    geotrain::launcher::PortAllocator ports(0);
    return YAML::Load(
        geotrain::launcher::plan_deployment(text, "t.yaml", settings, tmp.path(), ports)
            .config_yaml);
  };
  const std::string base = "regions: [a]\n";
  CHECK(plan_with(base + "run: {restart: {max_restarts: 1}}\n")["worker"]["checkpoint"]["every"]
            .as<int>() == 1);
  CHECK(plan_with(base + "worker: {checkpoint: {every: 4}}\nrun: {restart: {max_restarts: 1}}\n")
            ["worker"]["checkpoint"]["every"]
                .as<int>() == 4);
  // run.restart is on by default; max_restarts: 0 turns it, and the snapshots, off.
  CHECK(plan_with(base)["worker"]["checkpoint"]["every"].as<int>() == 1);
  CHECK_FALSE(plan_with(base + "run: {restart: {max_restarts: 0}}\n")["worker"]["checkpoint"]);
}

TEST_CASE("--resume plans from the run folder's config and keeps the user's netsim additions") {
  geotrain::test::TempDir tmp("recover-resume-text");
  CHECK_THROWS_WITH_AS(geotrain::launcher::resume_config_text(tmp.path()),
                       doctest::Contains("not a run folder"), geotrain::InputError);
  std::ofstream(tmp.path() / "config.yaml") << "regions: [a, b]\nworker: {rounds: 5}\n";
  std::ofstream(tmp.path() / "netsim.yaml")
      << "profile: lan.yaml\nseed: 9\nlinks:\n"
         "  - {from: a, to: b, listen: '127.0.0.1:1', target: '127.0.0.1:2', delay_ms: 7}\n"
         "  - {from: b, to: a, listen: '127.0.0.1:3', target: '127.0.0.1:4'}\n";
  const auto root = YAML::Load(geotrain::launcher::resume_config_text(tmp.path()));
  CHECK(root["worker"]["rounds"].as<int>() == 5);
  CHECK(root["netsim"]["seed"].as<int>() == 9);
  REQUIRE(root["netsim"]["links"].size() == 1);
  CHECK(root["netsim"]["links"][0]["delay_ms"].as<int>() == 7);
  CHECK_FALSE(root["netsim"]["links"][0]["listen"]);
}
