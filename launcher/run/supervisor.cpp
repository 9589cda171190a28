#include "launcher/run/supervisor.hpp"

#include "core/log.hpp"
#include "launcher/run/port_allocator.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;

namespace {
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

// geotrain's exit for bad input (a configuration value, a file it cannot do without: main.cpp's
// InputError): a process that exits so would meet the same input when restarted.
constexpr int kInputErrorExit = 2;
bool input_error(int status) { return status == kInputErrorExit; }

// The extra arguments of a restarted worker group.
std::vector<std::string> resume_args(uint32_t generation) {
  return {"--resume", "--generation", std::to_string(generation)};
}
// A restarted worker of an elastic region: it joins the live group of its region's generation.
std::vector<std::string> rejoin_args(uint32_t generation) {
  return {"--rejoin", "--generation", std::to_string(generation)};
}

fs::path server_metrics(const fs::path& run_dir, const std::string& region) {
  return run_dir / fmt::format("server-{}.metrics.jsonl", region);
}
}  // namespace

bool Supervisor::poll() {
  bool workers_left = false;
  for (auto& p : fleet_.procs()) {
    auto st = p->child.poll();
    if (p->spec.role == ProcessRole::worker) {
      if (!st) {
        workers_left = true;
      } else if (p->phase == Running::Phase::backoff) {
        workers_left = true;  // to be restarted alone, to rejoin its region's group
        if (failure_.empty()) rejoin_when_due(*p);
      } else if (*st == 0 && p->phase == Running::Phase::resuming) {
        on_rejoin(p->spec.region, p->spec.rank);  // training was over before it was admitted
      } else if (*st != 0 && failure_.empty() &&
                 recovery_[p->spec.region].phase != RegionRecovery::Phase::backoff) {
        on_worker_death(*p, *st);  // fails the run unless run.restart restarts it
      }
    } else if (failure_.empty()) {
      supervise(*p, st);
    }
  }
  for (auto& [region, rr] : recovery_) {
    if (failure_.empty()) restart_region_when_due(rr, region);
    workers_left = workers_left || rr.down();  // its workers are (being) restarted
  }
  return workers_left;
}

std::string Supervisor::restarts_used_up(const Running& p, int status) const {
  const auto why = failure_message(p, status);
  if (!settings_.restart.enabled()) return why;
  if (input_error(status))
    return fmt::format(
        "not restarted: exit {} is an input error, which a restart would meet "
        "again: {}",
        kInputErrorExit, why);
  return fmt::format("run.restart.max_restarts = {} used up: {}", settings_.restart.max_restarts,
                     why);
}

bool Supervisor::count_restart(const Running& p, int st, uint32_t& restarts, bool allowed,
                               size_t& fault) {
  const bool again = allowed && restarts < settings_.restart.max_restarts && !input_error(st);
  fault = faults_.fault(now_s(), p.spec.name, to_string(p.spec.role), p.spec.region,
                        describe_status(st), again, again ? restarts + 1 : restarts);
  if (!again) {
    failure_ = restarts_used_up(p, st);
    return false;
  }
  ++restarts;
  return true;
}

void Supervisor::on_death(Running& p, int st) {
  if (!count_restart(p, st, p.restarts, true, p.fault)) return;
  const double backoff = backoff_of(p);
  spdlog::warn("run: {} {} at {:.1f} s; restarting it in {} s (restart {} of {})", p.spec.name,
               describe_status(st), now_s(), backoff, p.restarts, settings_.restart.max_restarts);
  p.rounds_at_death = fewest_rounds(monitor_, settings_.regions);
  if (p.spec.role == ProcessRole::server)
    if (auto r = server_round(server_metrics(run_dir_, p.spec.region))) p.rounds_at_death = *r;
  p.phase = Running::Phase::backoff;
  p.phase_until = Clock::now() + seconds(backoff);
}

double Supervisor::backoff_of(const Running& p) const {
  return seconds_since(p.started) >= settings_.restart.healthy_after_s
             ? 0.0
             : settings_.restart.backoff_s;
}

bool Supervisor::leader_finished(const std::string& region) {
  for (auto& p : fleet_.procs())
    if (p->spec.role == ProcessRole::worker && p->spec.region == region && p->spec.rank == 0)
      return p->child.poll() == 0;
  return false;
}

void Supervisor::on_worker_death(Running& first_seen, int first_status) {
  // When a worker of a group dies, the others fail on the broken collective moments later:
  // blame one that a signal killed over one that exited with an error, if there is one.
  Running* dead = &first_seen;
  int st = first_status;
  for (auto& q : fleet_.procs()) {
    const auto qs = q->child.poll();
    if (q->spec.role == ProcessRole::worker && q->spec.region == first_seen.spec.region && qs &&
        *qs > 128 && st <= 128) {
      dead = q.get();
      st = *qs;
    }
  }
  Running& p = *dead;
  auto& rr = recovery_[p.spec.region];
  // A worker restarted alone that dies before it is back in its group (a leader that found no
  // worker to take the state from, say) does not get a second try alone: the region restarts.
  const bool rejoin_failed = p.phase == Running::Phase::resuming;
  if (settings_.elastic(p.spec.region) && rr.phase == RegionRecovery::Phase::running &&
      !rejoin_failed && others_alive(p))
    return on_member_death(p, st);
  if (!count_restart(p, st, rr.restarts, !leader_finished(p.spec.region), rr.fault)) return;
  const double backoff = backoff_of(p);
  spdlog::warn(
      "run: {} {} at {:.1f} s; restarting the workers of {} from their snapshots in {} s "
      "(restart {} of {})",
      p.spec.name, describe_status(st), now_s(), p.spec.region, backoff, rr.restarts,
      settings_.restart.max_restarts);
  fleet_.kill_region_workers(p.spec.region);
  rr.rounds_at_death = rr.last_round;
  rr.phase = RegionRecovery::Phase::backoff;
  rr.backoff_until = Clock::now() + seconds(backoff);
}

bool Supervisor::others_alive(const Running& dead) {
  for (auto& p : fleet_.procs())
    if (p.get() != &dead && p->spec.role == ProcessRole::worker &&
        p->spec.region == dead.spec.region && !p->child.poll().has_value())
      return true;
  return false;
}

void Supervisor::on_member_death(Running& p, int st) {
  if (!count_restart(p, st, p.restarts, true, p.fault)) return;
  const double backoff = backoff_of(p);
  spdlog::warn(
      "run: {} {} at {:.1f} s; the other workers of {} {}; restarting it in {} s to rejoin them "
      "(restart {} of {})",
      p.spec.name, describe_status(st), now_s(), p.spec.region,
      p.spec.rank == 0 ? "wait for it with the region's state" : "go on without it", backoff,
      p.restarts, settings_.restart.max_restarts);
  p.phase = Running::Phase::backoff;
  p.phase_until = Clock::now() + seconds(backoff);
}

void Supervisor::rejoin_when_due(Running& p) {
  if (p.phase != Running::Phase::backoff || Clock::now() < p.phase_until) return;
  fleet_.restart(p, rejoin_args(recovery_[p.spec.region].restarts));
  p.phase = Running::Phase::resuming;  // until its `rejoin` event
}

void Supervisor::restart_region_when_due(RegionRecovery& rr, const std::string& region) {
  if (rr.phase != RegionRecovery::Phase::backoff || Clock::now() < rr.backoff_until) return;
  for (auto& p : fleet_.procs())
    if (p->spec.role == ProcessRole::worker && p->spec.region == region) {
      p->restarts = rr.restarts;
      p->phase = Running::Phase::running;  // a worker restarted alone goes with the others
      fleet_.restart(*p, resume_args(rr.restarts));
    }
  rr.phase = RegionRecovery::Phase::resuming;
}

void Supervisor::on_worker_event(const nlohmann::json& e) {
  if (!e.is_object() || !e.contains("region") || !e["region"].is_string()) return;
  const auto kind = e.value("event", std::string());
  const auto region = e["region"].get<std::string>();
  if (kind == "rejoin") return on_rejoin(region, e.value("rank", 0u));
  if (e.value("rank", 0) != 0) return;
  if (kind == "regroup") return on_regroup(region, e);
  auto& rr = recovery_[region];
  const uint64_t round =
      e.contains("round") && e["round"].is_number_unsigned() ? e["round"].get<uint64_t>() : 0;
  if (kind == "resume" && rr.phase == RegionRecovery::Phase::resuming) {
    std::optional<uint64_t> snapshot;
    if (e.contains("checkpoint_round") && e["checkpoint_round"].is_number_unsigned())
      snapshot = e["checkpoint_round"].get<uint64_t>();
    int pid = 0;
    for (auto& p : fleet_.procs())
      if (p->spec.role == ProcessRole::worker && p->spec.region == region && p->spec.rank == 0)
        pid = p->child.pid();
    faults_.restarted(rr.fault, now_s(), pid, snapshot);
    spdlog::warn("run: {}", describe_fault(faults_.faults()[rr.fault]));
    rr.resumed_at = round;
    rr.phase = RegionRecovery::Phase::recovering;
  } else if (kind == "done" && rr.phase == RegionRecovery::Phase::recovering) {
    // Restarted after its last round (killed after its flush, during the final evaluation): it
    // trained nothing more and is done.
    faults_.recovered(rr.fault, now_s(), 0);
    spdlog::info("run: {}", describe_fault(faults_.faults()[rr.fault]));
    rr.phase = RegionRecovery::Phase::running;
  } else if (kind == "round" && e.value("steps", 0) > 0) {
    rr.last_round = round;
    if (rr.phase == RegionRecovery::Phase::recovering && round >= rr.resumed_at) {
      // Rounds the region had finished before the death and trains again.
      const uint64_t redone =
          rr.rounds_at_death + 1 > rr.resumed_at ? rr.rounds_at_death + 1 - rr.resumed_at : 0;
      faults_.recovered(rr.fault, now_s(), redone);
      spdlog::info("run: {}", describe_fault(faults_.faults()[rr.fault]));
      rr.phase = RegionRecovery::Phase::running;
    }
  }
}

Running* Supervisor::member_restarted_alone(const std::string& region, uint32_t rank) {
  for (auto& p : fleet_.procs())
    if (p->spec.role == ProcessRole::worker && p->spec.region == region && p->spec.rank == rank &&
        (p->phase == Running::Phase::backoff || p->phase == Running::Phase::resuming))
      return p.get();
  return nullptr;
}

void Supervisor::on_regroup(const std::string& region, const nlohmann::json& e) {
  // The leader's group went on without the dead members: the region trains again.
  if (!e.contains("lost") || !e["lost"].is_array()) return;
  for (const auto& rank : e["lost"]) {
    if (!rank.is_number_unsigned()) continue;
    Running* p = member_restarted_alone(region, rank.get<uint32_t>());
    if (p && !faults_.faults()[p->fault].recovery_s) faults_.recovered(p->fault, now_s(), 0);
  }
}

void Supervisor::on_rejoin(const std::string& region, uint32_t rank) {
  Running* p = member_restarted_alone(region, rank);
  if (p == nullptr || p->phase != Running::Phase::resuming) return;
  // Back in its region's group with the leader's state: nothing was trained again.
  faults_.restarted(p->fault, now_s(), p->child.pid(), std::nullopt);
  if (!faults_.faults()[p->fault].recovery_s) faults_.recovered(p->fault, now_s(), 0);
  spdlog::info("run: {}", describe_fault(faults_.faults()[p->fault]));
  p->phase = Running::Phase::running;
}

void Supervisor::supervise(Running& p, std::optional<int> st) {
  using Phase = Running::Phase;
  if (st && p.phase != Phase::backoff) return on_death(p, *st);
  switch (p.phase) {
    case Phase::running:
      return;
    case Phase::backoff:
      if (Clock::now() < p.phase_until) return;
      if (p.spec.role == ProcessRole::server) {
        p.metrics.emplace(server_metrics(run_dir_, p.spec.region));
        p.metrics->read_new();  // the dead process's lines
      }
      fleet_.restart(p);
      p.phase = Phase::starting;
      p.phase_until = Clock::now() + seconds(settings_.startup_timeout_s);
      return;
    case Phase::starting: {
      if (!ports_listening(p.spec.health_ports, p.child.pid())) {
        if (Clock::now() > p.phase_until)
          failure_ = fmt::format(
              "{} did not accept connections within run.startup_timeout_s = {} s of its "
              "restart; last lines of {}:\n{}",
              p.spec.name, settings_.startup_timeout_s, p.log.string(), tail_lines(p.log, 20));
        return;
      }
      const auto restored = p.metrics ? restored_round(*p.metrics) : std::nullopt;
      faults_.restarted(p.fault, now_s(), p.child.pid(), restored);
      spdlog::warn("run: {}", describe_fault(faults_.faults()[p.fault]));
      for (const auto& r : settings_.regions) {
        auto it = monitor_.regions().find(r);
        p.rounds_at_up[r] = it == monitor_.regions().end() ? 0 : it->second.rounds_done;
      }
      p.phase = Phase::resuming;
      return;
    }
    case Phase::resuming: {
      for (const auto& r : settings_.regions) {
        auto it = monitor_.regions().find(r);
        if (it == monitor_.regions().end() || it->second.rounds_done <= p.rounds_at_up[r]) return;
      }
      std::optional<uint64_t> lost;
      if (p.spec.role == ProcessRole::server) {
        const auto restored = faults_.faults()[p.fault].restored_round.value_or(0);
        lost = p.rounds_at_death > restored ? p.rounds_at_death - restored : 0;
      }
      faults_.recovered(p.fault, now_s(), lost);
      spdlog::info("run: {}", describe_fault(faults_.faults()[p.fault]));
      p.phase = Phase::running;
      return;
    }
  }
}

}  // namespace geotrain::launcher
