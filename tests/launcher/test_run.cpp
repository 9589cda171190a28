// geotrain run end to end with real servers and a real netsim, and scripted workers: the
// launcher runs a small shell script as "the binary", which execs the real geotrain for
// `server` and `netsim` and plays a worker (writes metrics JSONL, then exits as told).
// Checks the run folder, failure handling with the log tail, interruption, and that no child
// outlives the run.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "launcher/report/summary_schema.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/resume.hpp"
#include "tests/integration/process.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain::launcher;
using geotrain::test::processes_mentioning;
namespace fs = std::filesystem;

namespace {
struct Output {
  int code;
  std::string text;
};

// mode: ok | fail (worker eu-west/1 exits 3 after a message) | badinput (the same, exit 2: an
// input error) | hang (workers sleep) | afterflush (eu-west's leader dies by SIGKILL after its
// last round, before `done`, its member having finished; the region restarted from snapshots, it
// says it resumed after its last round and is done at once, as a leader restarted after its flush
// does) | afterflush_rejoin (the same while its member is still finishing: restarted alone with
// --rejoin, it rejoins and is done at once)
void write_fake_binary(const fs::path& file, const std::string& mode) {
  std::ofstream f(file);
  f << "#!/bin/sh\n"
       "if [ \"$1\" != worker ]; then exec " GEOTRAIN_BINARY
       " \"$@\"; fi\n"
       "region=$5; rank=$7; out=\"$(dirname \"$3\")/worker-$region-$rank.metrics.jsonl\"\n"
       "mode="
    << mode
    << "\n"
       "if [ $mode = hang ]; then exec sleep 60; fi\n"
       "if [ $mode = fail ] && [ $region = eu-west ] && [ $rank = 1 ]; then echo 'worker "
       "eu-west/1: cannot load data'; exit 3; fi\n"
       "if [ $mode = badinput ] && [ $region = eu-west ] && [ $rank = 1 ]; then echo 'worker "
       "eu-west/1: worker.data.path cannot be read'; exit 2; fi\n"
       "e() { echo \"{\\\"region\\\":\\\"$region\\\",\\\"rank\\\":$rank,$1}\" >> \"$out\"; }\n"
       "af=no; case $mode in afterflush*) af=yes;; esac\n"
       "if [ $af = yes ] && [ $region = eu-west ]; then case \"$*\" in *--rejoin*)\n"
       "  e '\"event\":\"rejoin\",\"time\":0,\"round\":4,\"step\":3,\"epoch\":1,\"seconds\":0'\n"
       "  e '\"event\":\"done\",\"time\":1,\"rounds\":0,\"steps\":0,\"wall_s\":1'\n"
       "  exit 0;; esac; fi\n"
       "if [ $af = yes ] && [ $region = eu-west ]; then case \"$*\" in *--resume*)\n"
       "  if [ $rank = 0 ]; then e "
       "'\"event\":\"resume\",\"time\":0,\"round\":4,\"checkpoint_round\":3'; fi\n"
       "  e '\"event\":\"done\",\"time\":1,\"rounds\":0,\"steps\":0,\"wall_s\":1'\n"
       "  exit 0;; esac; fi\n"
       "e '\"event\":\"start\",\"time\":0,\"rounds\":3'\n"
       "for r in 0 1 2; do\n"
       "  e "
       "\"\\\"event\\\":\\\"step\\\",\\\"time\\\":0.$r,\\\"round\\\":$r,\\\"step\\\":$r,"
       "\\\"loss\\\":1.5,\\\"compute_s\\\":0.01\"\n"
       "  if [ $rank = 0 ]; then\n"
       "    e "
       "\"\\\"event\\\":\\\"round\\\",\\\"time\\\":0.$r,\\\"round\\\":$r,\\\"bytes_pushed\\\":100,"
       "\\\"bytes_pulled\\\":50,"
       "\\\"staleness\\\":0,\\\"compute_s\\\":0.01,\\\"comm_s\\\":0.01,\\\"wait_s\\\":0.02\"\n"
       "    e "
       "\"\\\"event\\\":\\\"eval\\\",\\\"time\\\":0.$r,\\\"round\\\":$r,\\\"test_accuracy\\\":0."
       "9\"\n"
       "  fi\n"
       "done\n"
       "if [ $rank = 1 ] && [ $mode = afterflush ]; then sleep 0.05;\n"
       "elif [ $rank = 1 ] && [ $mode = afterflush_rejoin ]; then sleep 2; else sleep 0.3; fi\n"
       "if [ $af = yes ] && [ $region = eu-west ] && [ $rank = 0 ]; then kill -9 $$; fi\n"
       "e "
       "'\"event\":\"done\",\"time\":1,\"rounds\":3,\"steps\":3,\"wall_s\":1,\"final_test_"
       "accuracy\":0.9'\n";
  f.close();
  fs::permissions(file, fs::perms::owner_all);
}

// `plots`: the run section's `plots` key; the rest is the same for every case. Restarts back off
// 0.1 s (not 1 s): the cases that exhaust them test the path, not the pause.
fs::path write_config(const fs::path& dir, bool plots) {
  const auto file = dir / "fake.yaml";
  std::ofstream f(file);
  f << "regions: [us-east, eu-west]\n"
       "model: {tensors: [{name: w, size: 4096}, {name: head.b, size: 10}], critical: "
       "[\"head.*\"]}\n"
       "server: {heartbeat_ms: 200, dead_after_ms: 5000, metrics_every_ms: 200}\n"
       "worker: {workers_per_region: 2}\n"
       "run: {name: fake, wan_profile: " GEOTRAIN_SOURCE_DIR
       "/configs/wan/us-eu.yaml, target_accuracy: 0.5,\n"
       "      startup_timeout_s: 20, netsim_stats_interval_s: 0.1, plots: "
    << (plots ? "true" : "false") << ",\n      restart: {backoff_s: 0.1}}\n";
  return file;
}

// A plot script that leaves `plotted` in the run folder it is given.
fs::path write_fake_plot_script(const fs::path& dir) {
  const auto file = dir / "fake-plot.sh";
  std::ofstream(file) << "touch \"$1/plotted\"\n";
  return file;
}

LaunchOptions options(const fs::path& dir, const std::string& mode, bool plots = false) {
  write_fake_binary(dir / "fake-geotrain", mode);
  LaunchOptions o;
  o.config = write_config(dir, plots);
  o.python = "/bin/sh";
  o.plot_script = write_fake_plot_script(dir);
  o.out_dir = dir / "runs";
  o.binary = (dir / "fake-geotrain").string();
  o.redraw = false;
  o.grace_s = 5;
  return o;
}

std::string read(const fs::path& f) {
  std::ifstream in(f);
  return {std::istreambuf_iterator<char>(in), {}};
}
}  // namespace

TEST_CASE("a run starts servers, netsim and workers, and leaves a complete run folder") {
  geotrain::test::TempDir tmp("launcher-run");
  std::stop_source stop;
  const auto r = run_deployment(options(tmp.path(), "ok"), stop.get_token());
  CHECK(r.exit_code == 0);
  CHECK(r.status == "completed");
  for (const char* f :
       {"config.yaml", "netsim.yaml", "server-us-east.log", "server-eu-west.log", "netsim.log",
        "worker-us-east-0.log", "worker-eu-west-1.log", "worker-us-east-0.metrics.jsonl",
        "server-us-east.metrics.jsonl", "netsim.jsonl", "summary.json", "report.md"}) {
    CHECK_MESSAGE(fs::exists(r.run_dir / f), f);
  }
  const auto s = nlohmann::json::parse(read(r.run_dir / "summary.json"));
  CHECK(geotrain::summary::check(s) ==
        "");  // a real run's summary, every key in core/run_summary.json
  CHECK(s["final_test_accuracy"].get<double>() == doctest::Approx(0.9));
  CHECK(s["rounds"] == 3);
  CHECK(s["workers"] == 4);
  CHECK(s["wan_bytes_total"].get<double>() == doctest::Approx(2 * 3 * 150));
  CHECK(s["time_to_target_seconds"].is_number());
  CHECK(s["wall_seconds"].get<double>() > 0.3);
  CHECK(read(r.run_dir / "report.md").find("**completed**") != std::string::npos);
  CHECK_FALSE(fs::exists(r.run_dir / "plotted"));  // run.plots: false
  CHECK(processes_mentioning(r.run_dir.string()) == 0);
  // The launcher's readiness checks open no connection: the servers (CURVE on this WAN profile)
  // log no handshake cut short.
  for (const char* f : {"server-us-east.log", "server-eu-west.log"}) {
    const auto log = read(r.run_dir / f);
    CHECK_MESSAGE(log.find("(CURVE, keys from") != std::string::npos, f);
    CHECK_MESSAGE(log.find("refused a connection") == std::string::npos, log);
  }
}

TEST_CASE("a failing worker fails the run, shows its log, stops everything and keeps the results") {
  geotrain::test::TempDir tmp("launcher-fail");
  std::stop_source stop;
  const auto r = run_deployment(options(tmp.path(), "fail", /*plots=*/true), stop.get_token());
  CHECK(r.exit_code == 1);
  CHECK(r.status == "failed");
  const auto s = nlohmann::json::parse(read(r.run_dir / "summary.json"));
  CHECK(s["status"] == "failed");
  CHECK(s["failure"].get<std::string>().find("worker-eu-west-1 failed (exit 3)") !=
        std::string::npos);
  CHECK(read(r.run_dir / "worker-eu-west-1.log").find("cannot load data") != std::string::npos);
  CHECK(fs::exists(r.run_dir / "plotted"));  // a failed run is still plotted
  CHECK(processes_mentioning(r.run_dir.string()) == 0);
}

TEST_CASE("a worker that exits with an input error is not restarted: the run fails at once") {
  geotrain::test::TempDir tmp("launcher-badinput");
  std::stop_source stop;
  const auto r = run_deployment(options(tmp.path(), "badinput"), stop.get_token());
  CHECK(r.exit_code == 1);
  const auto s = nlohmann::json::parse(read(r.run_dir / "summary.json"));
  const auto failure = s["failure"].get<std::string>();
  CHECK_MESSAGE(failure.find("not restarted: exit 2 is an input error") != std::string::npos,
                failure);
  // Started once: its message once in its log, and no restart marker.
  const auto log = read(r.run_dir / "worker-eu-west-1.log");
  CHECK(log.find("worker.data.path cannot be read") != std::string::npos);
  CHECK(log.find("restarting") == std::string::npos);
  CHECK(processes_mentioning(r.run_dir.string()) == 0);
}

TEST_CASE("a leader killed after its last round is restarted, is done at once, and the run ends") {
  // Its member finished before it died: the region's workers restart from their snapshots. Still
  // finishing: the leader is restarted alone to rejoin it.
  std::string mode;
  SUBCASE("from snapshots") { mode = "afterflush"; }
  SUBCASE("alone, to rejoin its member") { mode = "afterflush_rejoin"; }
  geotrain::test::TempDir tmp("launcher-" + mode);
  std::stop_source stop;
  std::jthread watchdog([&stop] {  // a launcher waiting for rounds that never come hangs
    for (int i = 0; i < 600 && !stop.stop_requested(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.request_stop();
  });
  const auto r = run_deployment(options(tmp.path(), mode), stop.get_token());
  stop.request_stop();
  CHECK(r.exit_code == 0);
  CHECK(r.status == "completed");
  const auto s = nlohmann::json::parse(read(r.run_dir / "summary.json"));
  INFO(s.dump(2));
  CHECK(s["restarts"] == 1);
  REQUIRE(s["faults"].size() == 1);
  CHECK(geotrain::summary::check(s) == "");  // a fault's keys too
  CHECK(s["faults"][0]["process"] == "worker-eu-west-0");
  CHECK(s["faults"][0]["restarted"] == true);
  CHECK(s["faults"][0]["rounds_lost"] == 0);
  CHECK(s["faults"][0]["recovery_seconds"].is_number());  // it counts as recovered
  CHECK(processes_mentioning(r.run_dir.string()) == 0);
  // From snapshots, the restored round is the snapshot's; rejoining, no snapshot is read.
  if (mode == "afterflush")
    CHECK(s["faults"][0]["restored_round"] == 3);
  else
    CHECK(s["faults"][0]["restored_round"].is_null());
}

TEST_CASE("a stop request interrupts the run, stops every process and writes a partial summary") {
  geotrain::test::TempDir tmp("launcher-stop");
  std::stop_source stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    stop.request_stop();
  });
  const auto r = run_deployment(options(tmp.path(), "hang"), stop.get_token());
  CHECK(r.exit_code == 130);
  CHECK(r.status == "interrupted");
  CHECK(fs::exists(r.run_dir / "summary.json"));
  CHECK(processes_mentioning(r.run_dir.string()) == 0);
}

TEST_CASE("children do not outlive a launcher that is killed outright") {
  geotrain::test::TempDir tmp("launcher-kill");
  const auto o = options(tmp.path(), "hang");
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {  // the launcher, in a child of the test (it is single-threaded here)
    std::stop_source stop;
    run_deployment(o, stop.get_token());
    ::_exit(0);
  }
  // Wait for the workers to be started, then SIGKILL the launcher: no chance to clean up.
  auto started = [&] {
    if (!fs::exists(tmp.path() / "runs")) return false;
    for (const auto& e : fs::recursive_directory_iterator(tmp.path() / "runs"))
      if (e.path().filename() == "worker-eu-west-1.log") return true;
    return false;
  };
  for (int i = 0; i < 200 && !started(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(started());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string run_root = (tmp.path() / "runs").string();
  CHECK(processes_mentioning(run_root) >= 3);  // 2 servers and netsim at least
  ::kill(launcher, SIGKILL);
  int ws = 0;
  ::waitpid(launcher, &ws, 0);
  int left = -1;
  for (int i = 0; i < 100 && left != 0; ++i) {
    left = processes_mentioning(run_root);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(left == 0);
}

namespace {
Output run_cli(const std::string& args) {
  auto r = geotrain::test::run_binary(args);
  return {r.code, std::move(r.text)};
}
}  // namespace

TEST_CASE("geotrain run names a bad config key and exits with 2 before starting anything") {
  geotrain::test::TempDir tmp("launcher-cli");
  const auto out_dir = (tmp.path() / "runs").string();
  const auto file = tmp.path() / "bad.yaml";
  std::ofstream(file) << "regions: [a]\nmodel: {arch: 784-10}\nrun: {taget_accuracy: 0.9}\n";
  auto r = run_cli("run " + file.string() + " --out " + out_dir);
  CHECK(r.code == 2);
  CHECK(r.text.find("unknown key 'run.taget_accuracy'") != std::string::npos);
  CHECK(r.text.find("target_accuracy") != std::string::npos);

  // Keys of the other processes are checked by their own parsers, also before anything starts.
  std::ofstream(file, std::ios::trunc)
      << "regions: [a]\nmodel: {arch: 784-10}\nserver: {stalenes_bound: 2}\n";
  r = run_cli("run " + file.string() + " --out " + out_dir);
  CHECK(r.code == 2);
  CHECK(r.text.find("unknown key 'server.stalenes_bound'") != std::string::npos);
  std::ofstream(file, std::ios::trunc)
      << "regions: [a]\nmodel: {arch: 784-10}\nworker: {batch_size: 0}\n";
  r = run_cli("run " + file.string() + " --out " + out_dir);
  CHECK(r.code == 2);
  CHECK(r.text.find("worker.batch_size") != std::string::npos);
  // security.curve: auto, geotrain run's default, written out: accepted (the error is the next
  // mistake's); a value that is none of true, false, auto is not.
  std::ofstream(file, std::ios::trunc) << "regions: [a]\nmodel: {arch: 784-10}\n"
                                          "security: {curve: auto}\nworker: {batch_size: 0}\n";
  r = run_cli("run " + file.string() + " --out " + out_dir);
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.text.find("worker.batch_size") != std::string::npos, r.text);
  CHECK(r.text.find("auto") == std::string::npos);
  r = run_cli("run " + file.string() + " --out " + out_dir + " --set security.curve=maybe");
  CHECK(r.code == 2);
  CHECK(r.text.find("security.curve is 'maybe', allowed: true, false, auto") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "runs"));
}

TEST_CASE(
    "geotrain run refuses silent mistakes in a config: a key twice, yes for true, a stray glob") {
  geotrain::test::TempDir tmp("launcher-cli-mistakes");
  const auto out_dir = (tmp.path() / "runs").string();
  const auto file = tmp.path() / "bad.yaml";
  std::ofstream(file) << "regions: [a]\nmodel: {arch: 784-10}\nworker:\n  rounds: 16\n"
                         "  lr: 0.1\n  rounds: 8\n";
  auto r = run_cli("run " + file.string() + " --out " + out_dir);
  CHECK(r.code == 2);
  CHECK(r.text.find(file.string() + ": key 'worker.rounds' is written twice (lines 4 and 6)") !=
        std::string::npos);
  std::ofstream(file, std::ios::trunc) << "regions: [a]\nmodel: {arch: 784-10}\n";
  r = run_cli("run " + file.string() + " --out " + out_dir + " --set run.plots=yes");
  CHECK(r.code == 2);
  CHECK(r.text.find("run.plots is 'yes', allowed: true or false") != std::string::npos);
  r = run_cli("run " + file.string() + " --out " + out_dir + " --set 'model.critical=[fc9.*]'");
  CHECK(r.code == 2);
  CHECK(r.text.find("model.critical has 'fc9.*', which matches no tensor of the model (its "
                    "tensors: fc1.weight, fc1.bias)") != std::string::npos);
  r = run_cli("run " + file.string() + " --out " + out_dir + " --set run.taget_accuracy=0.9");
  CHECK(r.code == 2);
  CHECK(r.text.find("unknown key 'run.taget_accuracy'; did you mean 'run.target_accuracy'?") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "runs"));
}

namespace {
// A stopped run's folder as the launcher leaves it: config.yaml, a worker's metrics, and the
// checkpoint folders `make` asks for.
fs::path stopped_run(const fs::path& dir, const std::vector<std::string>& make) {
  const auto run = dir / "20260101-000000-stopped";
  fs::create_directories(run);
  std::ofstream(run / "config.yaml") << "regions: [us-east, eu-west]\n"
                                        "model: {tensors: [{name: w, size: 16}]}\n"
                                        "worker: {workers_per_region: 2}\n";
  std::ofstream(run / "worker-us-east-0.metrics.jsonl") << "{\"event\":\"start\"}\n";
  for (const auto& m : make) fs::create_directories(run / m);
  return run;
}
}  // namespace

TEST_CASE("--resume finds the servers' checkpoints and the workers' snapshots of a stopped run") {
  geotrain::test::TempDir tmp("launcher-resume-sources");
  const auto config = [](const fs::path& run) { return read(run / "config.yaml"); };
  auto run = stopped_run(tmp.path() / "both", {"checkpoints/us-east/ckpt-000000000003",
                                               "checkpoints/eu-west/ckpt-000000000003",
                                               "worker-checkpoints/us-east-0/ckpt-000000000003",
                                               "worker-checkpoints/us-east-1/ckpt-000000000003",
                                               "worker-checkpoints/eu-west-0/ckpt-000000000003",
                                               "worker-checkpoints/eu-west-1/ckpt-000000000003"});
  auto found = find_resume_sources(run, config(run));
  CHECK(found.complete());
  CHECK(found.servers == std::vector<std::string>{"us-east", "eu-west"});
  CHECK(found.workers.size() == 4);
  CHECK(found.describe() ==
        "servers from their checkpoints (2 of 2: us-east, eu-west); workers from their snapshots "
        "(4 of 4)");

  // Servers only: the workers take the servers' values; a checkpoint cut short does not count.
  run = stopped_run(tmp.path() / "servers", {"checkpoints/us-east/ckpt-000000000002",
                                             "worker-checkpoints/us-east-0/ckpt-000000000002.tmp"});
  found = find_resume_sources(run, config(run));
  CHECK_FALSE(found.complete());
  CHECK(found.servers == std::vector<std::string>{"us-east"});
  CHECK(found.workers.empty());
  CHECK(found.describe().find("no worker snapshot in " + (run / "worker-checkpoints").string() +
                              ": the workers take the servers' values") != std::string::npos);

  // Folders the config names instead of the defaults.
  run = stopped_run(tmp.path() / "dirs", {"snaps/eu-west-1/ckpt-000000000001"});
  std::ofstream(run / "config.yaml", std::ios::trunc)
      << "regions: [us-east, eu-west]\n"
         "worker: {workers_per_region: 2, checkpoint: {dir: snaps}}\n"
         "server: {checkpoint: {dir: /nonexistent/ckpt}}\n";
  found = find_resume_sources(run, config(run));
  CHECK(found.workers == std::vector<std::string>{"eu-west-1"});
  CHECK(found.server_dir == fs::path("/nonexistent/ckpt"));
  CHECK(
      found.describe().starts_with("no server checkpoint in /nonexistent/ckpt: the servers "
                                   "start afresh; workers from their snapshots (1 of 4)"));

  run = stopped_run(tmp.path() / "none", {"checkpoints/us-east/ckpt-000000000004.tmp"});
  CHECK_THROWS_WITH_AS(
      find_resume_sources(run, config(run)),
      doctest::Contains(("--resume " + run.string() +
                         ": nothing to resume from: no server checkpoint (ckpt-* in " +
                         (run / "checkpoints").string() +
                         "/<region>) and no worker snapshot (ckpt-* in " +
                         (run / "worker-checkpoints").string() + "/<region>-<rank>)")
                            .c_str()),
      geotrain::InputError);
}

TEST_CASE(
    "geotrain run --resume with nothing to resume from refuses and leaves the folder as it is") {
  geotrain::test::TempDir tmp("launcher-resume-none");
  const auto run = stopped_run(tmp.path(), {});
  const auto before = read(run / "worker-us-east-0.metrics.jsonl");
  const auto r = run_cli("run --resume " + run.string() + " --no-plots");
  CHECK(r.code == 2);
  CHECK(r.text.find("nothing to resume from: no server checkpoint") != std::string::npos);
  CHECK(r.text.find("server.checkpoint.every and worker.checkpoint.every (or run.restart) make "
                    "a run resumable") != std::string::npos);
  CHECK(r.text.find("resuming") == std::string::npos);  // it never claims to resume
  // Nothing written: no new files, the old metrics not appended to.
  CHECK(read(run / "worker-us-east-0.metrics.jsonl") == before);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(run)) files += e.is_regular_file();
  CHECK(files == 2);
}
