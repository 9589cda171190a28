// Launched by a real Slurm, as docs/deploy.md's job script says: a Slurm controller and one node
// daemon (Debian's slurmctld and slurmd, authenticated by their own munged), configured in a
// temporary folder on loopback ports and stopped at the end, touching no service of the machine.
// The job script is deploy.md's, but for one node instead of three (Debian's slurmd runs one node
// a host) and the paths: one `srun` step of three servers (rank r serves region r) and one of six
// workers (rank g is rank g % 2 of region g / 2), every process finding its place from
// SLURM_PROCID. The trained parameters must equal, bit for bit, those of the same config started
// by hand with --region and --rank.
//
// Needs root and Debian's slurmctld, slurmd, slurm-client and munge (the test command's set-up
// installs them). Without them, or when the daemons do not come up, every test here exits 77,
// which ctest reports as SKIPPED, with the reason on stdout.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

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

// munged, slurmctld and slurmd in the foreground, their files in `dir`; stopped (SIGTERM, then
// SIGKILL by Process) when it goes out of scope.
class MiniSlurm {
 public:
  explicit MiniSlurm(const std::filesystem::path& dir) : dir_(dir) {
    std::filesystem::create_directories(dir / "state");
    std::filesystem::create_directories(dir / "spool");
    const auto key = dir / "munge.key";
    if (std::system(
            fmt::format("mungekey --create --keyfile={} >/dev/null 2>&1", key.string()).c_str()) !=
        0) {
      why_ = "mungekey --create failed";
      return;
    }
    munged_ = std::make_unique<Process>(
        std::vector<std::string>{"munged", "-F", "--force", "--socket=" + socket().string(),
                                 "--key-file=" + key.string(),
                                 "--pid-file=" + (dir / "munged.pid").string(),
                                 "--log-file=" + (dir / "munged.log").string(),
                                 "--seed-file=" + (dir / "munged.seed").string()},
        dir / "munged.out", Process::Program{});
    std::ofstream(conf()) << fmt::format(
        R"(ClusterName=geotrain-test
SlurmctldHost=localhost
SlurmctldPort={}
SlurmdPort={}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={}
CredType=cred/munge
StateSaveLocation={}/state
SlurmdSpoolDir={}/spool
SlurmctldPidFile={}/slurmctld.pid
SlurmdPidFile={}/slurmd.pid
SlurmctldLogFile={}/slurmctld.log
SlurmdLogFile={}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
)",
        free_port(), free_port(), socket().string(), dir.string(), dir.string(), dir.string(),
        dir.string(), dir.string(), dir.string());
    ::setenv("SLURM_CONF", conf().c_str(), 1);  // srun, sbatch and sinfo read it
    ctld_ = std::make_unique<Process>(
        std::vector<std::string>{"slurmctld", "-D", "-i", "-f", conf().string()},
        dir / "slurmctld.out", Process::Program{});
    slurmd_ =
        std::make_unique<Process>(std::vector<std::string>{"slurmd", "-D", "-f", conf().string()},
                                  dir / "slurmd.out", Process::Program{});
    // Up when the node is idle (the controller answers and the node registered).
    for (int i = 0; i < 100; ++i) {
      if (run_text("sinfo -h -o %t").find("idle") != std::string::npos) return;
      std::this_thread::sleep_for(200ms);
    }
    why_ = "the node did not come up within 20 s; slurmctld.log:\n" + tail("slurmctld.log") +
           "\nslurmd.log:\n" + tail("slurmd.log");
  }
  ~MiniSlurm() {
    for (auto* p : {slurmd_.get(), ctld_.get(), munged_.get()})
      if (p) {
        p->terminate();
        p->wait(10s);
      }
    ::unsetenv("SLURM_CONF");
  }
  // Why the daemons are not up; empty when they are.
  const std::string& why_not() const { return why_; }
  std::string tail(const std::string& file) const {
    return run_text("tail -n 20 " + (dir_ / file).string());
  }

 private:
  std::filesystem::path socket() const { return dir_ / "munge.sock"; }
  std::filesystem::path conf() const { return dir_ / "slurm.conf"; }

  std::filesystem::path dir_;
  std::string why_;
  std::unique_ptr<Process> munged_, ctld_, slurmd_;
};

// docs/deploy.md's job script for one node: servers in the background of the job, then workers.
std::string job_script(const std::filesystem::path& config) {
  return fmt::format(R"(#!/bin/bash
#SBATCH --job-name=geotrain
#SBATCH --nodes=1
#SBATCH --ntasks=9
# One server per region (rank r -> region r), in the background of the job...
srun --ntasks=3 --exact {0} server --config {1} &
# ...and two workers per region: global rank g -> region g / 2, rank g % 2.
srun --ntasks=6 --exact --distribution=block {0} worker --config {1}
# The workers are done: stop the servers (SIGTERM; they write their final metrics).
kill %1; wait
)",
                     GEOTRAIN_BINARY, config.string());
}

MiniSlurm* slurm = nullptr;  // up for the whole run (main)

}  // namespace

TEST_CASE("a Slurm job of servers and workers trains the model the processes started by hand do") {
  REQUIRE(slurm != nullptr);
  TempDir dir("slurm-job");
  std::vector<std::string> endpoints;
  for (size_t i = 0; i < kRegions.size(); ++i)
    endpoints.push_back(fmt::format("tcp://127.0.0.1:{}", free_port()));
  const auto launched = dir.path() / "slurm-job", by_hand = dir.path() / "by-hand";
  std::filesystem::create_directories(launched);
  std::filesystem::create_directories(by_hand);
  const auto config = launched / "geo.yaml", script = launched / "job.sh";
  std::ofstream(config) << deployment_config(launched, endpoints, "127.0.0.1", 1);
  std::ofstream(script) << job_script(config);
  const auto out = launched / "job.out";
  // --wait: sbatch returns when the job ends, with its exit code.
  const auto sbatch =
      run_text(fmt::format("cd {} && timeout 170 sbatch --wait --output={} {}; echo exit=$?",
                           launched.string(), out.string(), script.string()));
  const auto job_log = run_text("cat " + out.string());
  INFO("sbatch: ", sbatch, "\njob output:\n", job_log, "\nslurmd.log:\n",
       slurm->tail("slurmd.log"));
  REQUIRE(sbatch.find("Submitted batch job") != std::string::npos);
  CHECK(sbatch.find("exit=0") != std::string::npos);
  for (const auto& r : kRegions) {
    const auto rounds = events(launched / fmt::format("worker-{}-0.metrics.jsonl", r), "round");
    CHECK_MESSAGE(rounds.size() == 6, "region ", r);
    CHECK(std::filesystem::exists(launched / fmt::format("worker-{}-1.metrics.jsonl", r)));
  }

  std::vector<std::string> ports;
  for (size_t i = 0; i < kRegions.size(); ++i)
    ports.push_back(fmt::format("tcp://127.0.0.1:{}", free_port()));
  run_by_hand(
      by_hand, ports, [](size_t) { return std::vector<std::string>{}; },
      [](size_t) { return std::string("127.0.0.1"); }, 1);
  for (const auto& r : kRegions) {
    const auto a = read_params(launched / fmt::format("params-{}.f32", r));
    const auto b = read_params(by_hand / fmt::format("params-{}.f32", r));
    REQUIRE(a.size() == b.size());
    CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, "region ", r,
                  ": parameters differ between the Slurm job and the processes started by hand");
  }
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
  MiniSlurm daemons(dir.path());
  if (!daemons.why_not().empty()) {
    std::printf("SKIPPED: Slurm does not start here: %s\n", daemons.why_not().c_str());
    return 77;
  }
  slurm = &daemons;
  return context.run();
}
