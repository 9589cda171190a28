// Launched by a real Slurm, as docs/deploy.md says: Slurm clusters of the test's own (Debian's
// slurmctld and one slurmd per node, several on this host, authenticated by their own munged),
// configured in temporary folders on loopback ports and stopped at the end, touching no service
// of the machine.
// - deploy.md's job script, but for the paths, on three nodes: one `srun` step of three servers
//   (rank r serves region r) and one of six workers (rank g is rank g % 2 of region g / 2), every
//   process finding its place from SLURM_PROCID;
// - one site per cluster: three clusters, each running the slurm.sh `geotrain site` wrote for its
//   region (rank = SLURM_PROCID within the region), on the tests' config (bit for bit) and on
//   the demo's (to `geotrain run`'s accuracy within run-to-run noise);
// - that script's recovery: a worker SIGKILLed mid-run, its site's workers started again from
//   their snapshots as the next generation.
// The trained parameters must equal, bit for bit, those of `geotrain run` on the same config (the
// first) or of the processes started by hand with --region and --rank (the others).
//
// Needs root and Debian's slurmctld, slurmd, slurm-client and munge (the test command's set-up
// installs them). Without them, or when the daemons do not come up, every test here exits 77,
// which ctest reports as SKIPPED, with the reason on stdout.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "deployment.hpp"
#include "temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

std::string run_text(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen((command + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  return out;
}

// A Slurm cluster of `nodes` nodes (node01, node02, ...), all on this host: munged, slurmctld and
// one slurmd per node (Debian's slurmd runs several a host, each on its own port) in the
// foreground, their files in `dir`; stopped (SIGTERM, then SIGKILL by Process) when it goes out
// of scope.
class MiniSlurm {
 public:
  MiniSlurm(const std::filesystem::path& dir, size_t nodes) : dir_(dir) {
    std::filesystem::create_directories(dir / "state");
    if (!start_munged()) return;
    write_conf(nodes);
    daemons_.push_back(std::make_unique<Process>(
        std::vector<std::string>{"slurmctld", "-D", "-i", "-f", conf().string()},
        dir / "slurmctld.out", Process::Program{}));
    for (size_t n = 1; n <= nodes; ++n)
      daemons_.push_back(std::make_unique<Process>(
          std::vector<std::string>{"slurmd", "-D", "-f", conf().string(), "-N", node(n)},
          dir / fmt::format("slurmd-{}.out", node(n)), Process::Program{}));
    // Up when every node is idle (the controller answers and the nodes registered); a client
    // command waits for an unresponsive controller, hence its own timeout.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto states = run_text("timeout 5 env " + env() + " sinfo -h -N -o %t");
      size_t idle = 0;
      for (size_t at = states.find("idle"); at != std::string::npos;
           at = states.find("idle", at + 1))
        ++idle;
      if (idle == nodes) return;
      std::this_thread::sleep_for(200ms);
    }
    why_ = "the nodes did not come up within 20 s; slurmctld.log:\n" + tail("slurmctld.log") +
           "\nslurmd-node01.out:\n" + tail("slurmd-node01.out");
  }
  ~MiniSlurm() {
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
      (*it)->terminate();
      (*it)->wait(10s);
    }
  }
  // Why the daemons are not up; empty when they are.
  const std::string& why_not() const { return why_; }
  // The environment a client command (sbatch, srun, sinfo) of this cluster runs with.
  std::string env() const { return "SLURM_CONF=" + conf().string(); }
  std::string tail(const std::string& file) const {
    return run_text("tail -n 20 " + (dir_ / file).string());
  }
  static std::string node(size_t n) { return fmt::format("node{:02}", n); }

 private:
  std::filesystem::path socket() const { return dir_ / "munge.sock"; }
  std::filesystem::path conf() const { return dir_ / "slurm.conf"; }

  bool start_munged() {
    const auto key = dir_ / "munge.key";
    const auto made = fmt::format("mungekey --create --keyfile={} >/dev/null 2>&1", key.string());
    if (std::system(made.c_str()) != 0) {
      why_ = "mungekey --create failed";
      return false;
    }
    daemons_.push_back(std::make_unique<Process>(
        std::vector<std::string>{"munged", "-F", "--force", "--socket=" + socket().string(),
                                 "--key-file=" + key.string(),
                                 "--pid-file=" + (dir_ / "munged.pid").string(),
                                 "--log-file=" + (dir_ / "munged.log").string(),
                                 "--seed-file=" + (dir_ / "munged.seed").string()},
        dir_ / "munged.out", Process::Program{}));
    return true;
  }

  // Loopback ports; no cgroups, accounting or MPI plugin; more CPUs a node than the host has.
  void write_conf(size_t nodes) const {
    const std::string d = dir_.string();
    std::string node_lines, names;
    for (size_t n = 1; n <= nodes; ++n) {
      node_lines += fmt::format(
          "NodeName={} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=4 State=UNKNOWN\n",
          node(n), free_port());
      if (n > 1) names += ',';
      names += node(n);
    }
    std::ofstream(conf()) << fmt::format(
        R"(ClusterName=geotrain-test
SlurmctldHost=localhost
SlurmctldPort={0}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={2}
CredType=cred/munge
StateSaveLocation={1}/state
SlurmdSpoolDir={1}/spool-%n
SlurmctldPidFile={1}/slurmctld.pid
SlurmdPidFile={1}/slurmd-%n.pid
SlurmctldLogFile={1}/slurmctld.log
SlurmdLogFile={1}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
{3}PartitionName=test Nodes={4} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
)",
        free_port(), d, socket().string(), node_lines, names);
  }

  std::filesystem::path dir_;
  std::string why_;
  std::vector<std::unique_ptr<Process>> daemons_;  // munged, slurmctld, the slurmds
};

// Submits `script` from its folder to `cluster`; the job's id.
std::string submit(const std::filesystem::path& script, const MiniSlurm& cluster) {
  const auto folder = script.parent_path();
  auto id = run_text(fmt::format("cd {} && timeout 30 env {} sbatch --parsable --output={} {}",
                                 folder.string(), cluster.env(), (folder / "job.out").string(),
                                 script.string()));
  id = id.substr(0, id.find_first_of(";\n"));
  const bool number = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
  REQUIRE_MESSAGE(number, "sbatch: ", id);
  return id;
}

// The value of `key` (e.g. "JobState=") in scontrol's one-line output.
std::string field(const std::string& line, const std::string& key) {
  const auto at = line.find(key);
  if (at == std::string::npos) return "";
  const auto from = at + key.size();
  return line.substr(from, line.find_first_of(" \n", from) - from);
}

// The job's exit code once it ended, polled every 0.2 s (sbatch --wait polls at growing
// intervals, up to tens of seconds late); nullopt past `timeout`, the job then cancelled.
std::optional<int> wait_job(const std::string& id, const MiniSlurm& cluster,
                            std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto info =
        run_text(fmt::format("timeout 10 env {} scontrol -o show job {}", cluster.env(), id));
    const auto state = field(info, "JobState=");
    if (state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" &&
        state != "COMPLETING" && !state.empty()) {
      const auto code = field(info, "ExitCode=");  // "<exit code>:<signal>"
      return code.empty() ? -1 : std::stoi(code.substr(0, code.find(':')));
    }
    std::this_thread::sleep_for(200ms);
  }
  run_text(fmt::format("{} scancel {}", cluster.env(), id));
  return std::nullopt;
}

// docs/deploy.md's job script, but for the paths: three nodes, one server and two workers on each.
std::string job_script(const std::filesystem::path& config) {
  return fmt::format(R"SH(#!/bin/bash
#SBATCH --job-name=geotrain
#SBATCH --nodes=3
#SBATCH --nodelist=node01,node02,node03
#SBATCH --ntasks-per-node=3
# One server per node (rank r -> region r), in the background of the job...
srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --exact --job-name=geotrain-servers \
     {0} server --config {1} &
# ...and two workers per node: global rank g -> region g / 2, rank g % 2.
srun --nodes=3 --ntasks=6 --ntasks-per-node=2 --exact --distribution=block \
     {0} worker --config {1}
# The workers are done: SIGTERM to the servers' step (they write their final metrics and leave;
# a signal to srun would cancel the step and kill them).
scancel --signal=TERM "$(squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" | awk '$2 == "geotrain-servers" {{print $1}}')"
wait
)SH",
                     GEOTRAIN_BINARY, config.string());
}

MiniSlurm* slurm = nullptr;  // up for the whole run (main)

}  // namespace

TEST_CASE("a Slurm job of servers and workers trains the model `geotrain run` trains") {
  REQUIRE(slurm != nullptr);
  TempDir dir("slurm-job");
  const auto launched = dir.path() / "slurm-job", one_host = dir.path() / "geotrain-run";
  std::filesystem::create_directories(launched);
  const auto config = launched / "geo.yaml", script = launched / "job.sh";
  std::ofstream(config) << deployment_config(launched, loopback_endpoints(), "127.0.0.1", 1);
  std::ofstream(script) << job_script(config);
  const auto out = launched / "job.out";
  const auto code = wait_job(submit(script, *slurm), *slurm, 170s);
  INFO("job output:\n", run_text("cat " + out.string()), "\nslurmd.log:\n",
       slurm->tail("slurmd-node01.log"));
  CHECK(code.value_or(-1) == 0);
  for (const auto& r : kRegions) {
    const auto rounds = events(launched / fmt::format("worker-{}-0.metrics.jsonl", r), "round");
    CHECK_MESSAGE(rounds.size() == 6, "region ", r);
    CHECK(std::filesystem::exists(launched / fmt::format("worker-{}-1.metrics.jsonl", r)));
  }

  // The same config run on one host by `geotrain run` (netsim on the LAN profile between the
  // regions: synchronous rounds, so the links change the time, not the model).
  const auto run = run_text(fmt::format("{} run {} --wan lan --no-plots --out {}", GEOTRAIN_BINARY,
                                        config.string(), one_host.string()));
  REQUIRE_MESSAGE(run.find("completed") != std::string::npos, run);
  std::filesystem::path run_dir;
  for (const auto& e : std::filesystem::directory_iterator(one_host)) run_dir = e.path();
  check_same_model(launched, run_dir, "the Slurm job and geotrain run");
}

namespace {

// Site `region`'s files, written by `geotrain site` into dir/site-<region>.
std::filesystem::path write_site(const std::filesystem::path& dir,
                                 const std::filesystem::path& config, const std::string& region) {
  const auto site = dir / ("site-" + region);
  const auto out = run_text(fmt::format("{0} site --config {1} --region {2} --out {3} --binary {0}",
                                        GEOTRAIN_BINARY, config.string(), region, site.string()));
  REQUIRE_MESSAGE(std::filesystem::exists(site / "slurm.sh"), out);
  return site;
}

// Three clusters, the run's own (a) and two more, each running its region's `geotrain site`
// job of one deployment config.
struct Sites {
  TempDir dir{"slurm-sites"};
  MiniSlurm b{dir.path() / "slurm-b", 1}, c{dir.path() / "slurm-c", 1};
  std::vector<const MiniSlurm*> clusters{slurm, &b, &c};
  std::vector<std::filesystem::path> folders;  // each site's, as `geotrain site` wrote it
  std::vector<std::string> jobs;               // each site's job, on its own cluster

  // Every cluster is up: REQUIREd by each case.
  bool up() const { return slurm && b.why_not().empty() && c.why_not().empty(); }
  // The deployment's folder (its metrics, parameters and snapshots) and the config file in it.
  std::filesystem::path config_file() const {
    std::filesystem::create_directories(dir.path() / "sites");
    return dir.path() / "sites" / "geo.yaml";
  }
  // Writes every site's files for `config` (in its folder) and submits their jobs.
  void submit_all(const std::filesystem::path& config) {
    for (size_t i = 0; i < kRegions.size(); ++i) {
      folders.push_back(write_site(config.parent_path(), config, kRegions[i]));
      jobs.push_back(submit(folders.back() / "slurm.sh", *clusters[i]));
    }
  }
  // Every job ends with exit code 0.
  void check_all_succeed() const {
    for (size_t i = 0; i < kRegions.size(); ++i) {
      const auto code = wait_job(jobs[i], *clusters[i], 170s);
      CHECK_MESSAGE(code.value_or(-1) == 0, "site ", kRegions[i], ":\n",
                    run_text("cat " + (folders[i] / "job.out").string()));
    }
  }
};

}  // namespace

TEST_CASE(
    "three sites, each with its own Slurm, run `geotrain site`'s scripts: the one-host model") {
  Sites sites;
  REQUIRE_MESSAGE(sites.up(), sites.b.why_not(), sites.c.why_not());
  const auto config = sites.config_file(), launched = config.parent_path();
  std::ofstream(config) << deployment_config(launched, loopback_endpoints(), "127.0.0.1", 1);
  sites.submit_all(config);
  sites.check_all_succeed();
  check_same_as_by_hand(launched, sites.dir.path() / "by-hand", "the three sites");
}

TEST_CASE(
    "a site's worker killed mid-run: its step starts again from the snapshots and the run ends") {
  Sites sites;
  REQUIRE_MESSAGE(sites.up(), sites.b.why_not(), sites.c.why_not());
  const auto config = sites.config_file(), launched = config.parent_path();
  // 30 rounds of 2 steps of 100 ms (emulated), a snapshot every round.
  auto text = deployment_config(launched, loopback_endpoints(), "127.0.0.1", 1);
  const auto rounds = text.find("rounds: 6");
  REQUIRE(rounds != std::string::npos);
  text = text.substr(0, rounds) + "rounds: 30" + text.substr(rounds + 9);
  std::ofstream(config)
      << text << "  step_time_ms: {a: 100, b: 100, c: 100}\n  checkpoint: {every: 1, keep: 2}\n";
  sites.submit_all(config);
  // Once region a has trained 3 rounds, SIGKILL one of its workers.
  const auto leader_a = launched / "worker-a-0.metrics.jsonl";
  for (int i = 0; i < 600 && events(leader_a, "round").size() < 3; ++i)
    std::this_thread::sleep_for(100ms);
  REQUIRE(events(leader_a, "round").size() >= 3);
  const std::string needle = (sites.folders[0] / "geo.yaml").string();
  pid_t victim = 0;
  for (const auto& p : std::filesystem::directory_iterator("/proc")) {
    std::ifstream f(p.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    if (cmd.find(std::string("worker") + '\0') != std::string::npos &&
        cmd.find(needle) != std::string::npos && cmd.find("srun") == std::string::npos)
      victim = static_cast<pid_t>(std::stoi(p.path().filename().string()));
    if (victim) break;
  }
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  sites.check_all_succeed();
  // Region a's workers started again as generation 1, from their snapshots, and every region
  // finished its 30 rounds with the global model.
  const auto starts = events(leader_a, "start");
  REQUIRE(starts.size() == 2);
  CHECK(starts[1]["generation"] == 1);
  CHECK(run_text("cat " + (sites.folders[0] / "job.out").string()).find("try 1 of 3") !=
        std::string::npos);
  for (const auto& r : kRegions) {
    const auto done = events(launched / fmt::format("worker-{}-0.metrics.jsonl", r), "done");
    REQUIRE_MESSAGE(!done.empty(), "region ", r);
    CHECK(done.back()["global_model"] == true);
  }
}

namespace {

// configs/demo.yaml for three sites a, b, c on loopback, `rounds` rounds, its files in `dir`.
std::string demo_config(const std::filesystem::path& dir, uint32_t rounds) {
  std::ifstream in(std::string(GEOTRAIN_SOURCE_DIR) + "/configs/demo.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto swap = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "configs/demo.yaml has no '", from, "'");
    text = text.substr(0, at) + to + text.substr(at + from.size());
  };
  const auto eps = loopback_endpoints();
  swap("regions: [us-east, eu-west, ap-southeast]", "regions: [a, b, c]");
  swap("server:\n", fmt::format("server:\n  endpoints: {{a: \"{}\", b: \"{}\", c: \"{}\"}}\n"
                                "  run_dir: \"{}\"\n",
                                eps[0], eps[1], eps[2], dir.string()));
  swap("  rounds: 200", fmt::format("  rounds: {}\n  run_dir: \"{}\"\n  gloo_host: 127.0.0.1",
                                    rounds, dir.string()));
  return text;
}

// The global model's test accuracy in a leader's `done` event.
double final_accuracy_of(const std::filesystem::path& metrics) {
  const auto done = events(metrics, "done");
  REQUIRE_MESSAGE(!done.empty(), metrics.string());
  REQUIRE(done.back()["global_model"] == true);
  return done.back()["final_test_accuracy"].get<double>();
}

// What a leader's rounds say of its exchanges, for a failure's message: rounds, shards deferred
// and merged late, the longest shard wait, the largest staleness.
std::string exchanges_of(const std::filesystem::path& metrics) {
  const auto rounds = events(metrics, "round");
  uint64_t deferred = 0, late = 0, staleness = 0;
  double wait = 0;
  for (const auto& e : rounds) {
    deferred += e.value("deferred_shards", uint64_t{0});
    late += e.value("late_shards", uint64_t{0});
    staleness = std::max(staleness, e.value("staleness", uint64_t{0}));
    wait = std::max(wait, e.value("shard_wait_s", 0.0));
  }
  return fmt::format(
      "{}: {} rounds, {} deferred and {} late shards, shard wait up to {:.3f} s, "
      "staleness up to {}",
      metrics.filename().string(), rounds.size(), deferred, late, wait, staleness);
}

}  // namespace

TEST_CASE("three sites run the demo's config to the accuracy `geotrain run` reaches on one host") {
  // 1 bit both ways with eager overlap: the merges follow the pushes' arrival order, and the
  // sites start a moment apart, so two launches agree to run-to-run noise, not bit for bit (24
  // rounds: within 0.25 pp in three tries; 12 rounds were up to 1.7 pp apart).
  Sites sites;
  REQUIRE_MESSAGE(sites.up(), sites.b.why_not(), sites.c.why_not());
  const auto config = sites.config_file(), launched = config.parent_path();
  const auto one_host = sites.dir.path() / "geotrain-run";
  std::ofstream(config) << demo_config(launched, 24);
  sites.submit_all(config);
  sites.check_all_succeed();
  const auto run = run_text(fmt::format("{} run {} --wan lan --no-plots --out {}", GEOTRAIN_BINARY,
                                        config.string(), one_host.string()));
  REQUIRE_MESSAGE(run.find("completed") != std::string::npos, run);
  std::filesystem::path run_dir;
  for (const auto& e : std::filesystem::directory_iterator(one_host)) run_dir = e.path();
  const double apart = final_accuracy_of(launched / "worker-a-0.metrics.jsonl");
  const double together = final_accuracy_of(run_dir / "worker-a-0.metrics.jsonl");
  MESSAGE("24 demo rounds: three sites ", apart, ", geotrain run ", together);
  std::string exchanges;
  for (const char* r : {"a", "b", "c"})
    exchanges += exchanges_of(launched / fmt::format("worker-{}-0.metrics.jsonl", r)) + "; ";
  INFO("three sites: " << exchanges
                       << "one host: " << exchanges_of(run_dir / "worker-a-0.metrics.jsonl"));
  CHECK(apart > 0.75);
  CHECK(std::abs(apart - together) < 0.01);
  // Every site's leader ended on the same global model.
  CHECK(final_accuracy_of(launched / "worker-b-0.metrics.jsonl") == apart);
  CHECK(final_accuracy_of(launched / "worker-c-0.metrics.jsonl") == apart);
}

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::printf("SKIPPED: the test's own slurmd runs as root\n");
    return 77;
  }
  for (const char* tool : {"slurmctld", "slurmd", "sbatch", "srun", "sinfo", "munged", "mungekey"})
    if (std::system(fmt::format("command -v {} >/dev/null 2>&1", tool).c_str()) != 0) {
      std::printf(
          "SKIPPED: %s is not installed (Debian's slurmctld, slurmd, slurm-client and "
          "munge; scripts/bootstrap.sh)\n",
          tool);
      return 77;
    }
  // The daemons start before any test (the helpers they use assert through doctest's context).
  doctest::Context context(argc, argv);
  context.setAsDefaultForAssertsOutOfTestCases();
  geotrain::test::TempDir dir("slurm");
  MiniSlurm daemons(dir.path(), 3);
  if (!daemons.why_not().empty()) {
    std::printf("SKIPPED: Slurm does not start here: %s\n", daemons.why_not().c_str());
    return 77;
  }
  slurm = &daemons;
  return context.run();
}
