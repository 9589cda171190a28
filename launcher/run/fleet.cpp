#include "launcher/run/fleet.hpp"

#include <signal.h>

#include <fstream>

#include "core/log.hpp"

namespace geotrain::launcher {

Running& Fleet::start(const ProcessSpec& spec) {
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

void Fleet::restart(Running& p, const std::vector<std::string>& extra) {
  std::ofstream(p.log, std::ios::app)
      << fmt::format("--- geotrain run: restarting {} (restart {}) ---\n", p.spec.name, p.restarts);
  auto args = p.spec.args;
  args.insert(args.end(), extra.begin(), extra.end());
  p.child = ChildProcess(binary_, args, p.log, group_);
  p.started = Clock::now();
  spdlog::debug("run: restarted {} (pid {})", p.spec.name, p.child.pid());
  if (events_)
    events_->started(seconds_since(t0_), p.spec.name, to_string(p.spec.role), p.child.pid(),
                     p.restarts);
}

void Fleet::stop(std::optional<ProcessRole> role) {
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

void Fleet::kill_region_workers(const std::string& region) {
  const auto in_region = [&](const Running& p) {
    return p.spec.role == ProcessRole::worker && p.spec.region == region;
  };
  for (auto& p : procs_)
    if (in_region(*p) && !p->child.poll()) p->child.signal(SIGKILL);
  for (auto& p : procs_)
    if (in_region(*p)) p->child.wait_for(std::chrono::seconds(5));
}

std::string failure_message(const Running& p, int status) {
  return fmt::format("{} failed ({}); last lines of {}:\n{}", p.spec.name, describe_status(status),
                     p.log.string(), tail_lines(p.log, 20));
}

}  // namespace geotrain::launcher
