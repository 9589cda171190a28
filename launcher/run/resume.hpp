// `geotrain run --resume RUN_DIR`: what a stopped run's folder says about how to start it again.
//
// The run folder's config.yaml is the resolved config every process read; resuming plans the
// deployment again from it (fresh loopback ports, the same run folder), so the user's netsim
// additions (seed, per-link overrides and faults), which the resolved config folded into
// netsim.yaml, are read back from netsim.yaml into a `netsim:` section. The servers then
// restore their newest verified checkpoints and the workers start with --resume (worker
// snapshots, worker/run/worker_checkpoint.hpp). A folder with neither a server checkpoint nor a
// worker snapshot is refused (find_resume_sources()): its run would start afresh and append a new
// run to the old run's metrics. Pure apart from reading the folder; InputError naming the folder
// or file when the folder is not a run folder or holds nothing to resume from.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace geotrain::launcher {

// The config text to plan the resumed run from.
std::string resume_config_text(const std::filesystem::path& run_dir);

// What a stopped run left to resume from, found where its config (`config_text`, the folder's
// config.yaml) puts checkpoints: <run>/<server.checkpoint.dir>/<region>/ckpt-* for each server,
// <run>/<worker.checkpoint.dir>/<region>-<rank>/ckpt-* for each worker.
struct ResumeSources {
  std::vector<std::string> servers;  // regions whose server left a checkpoint
  std::vector<std::string> workers;  // "<region>-<rank>" of the workers that left a snapshot
  std::size_t server_count = 0;      // how many there are of each
  std::size_t worker_count = 0;
  std::filesystem::path server_dir;  // <run>/<server.checkpoint.dir>
  std::filesystem::path worker_dir;  // <run>/<worker.checkpoint.dir>

  // Every server and every worker has something to resume from.
  bool complete() const { return servers.size() == server_count && workers.size() == worker_count; }
  // For the launcher's log: "servers from their checkpoints (2 of 2: a, b); workers from their
  // snapshots (4 of 4)", or what happens to the servers or workers that have none.
  std::string describe() const;
};

// InputError when there is nothing to resume from (no server checkpoint and no worker snapshot),
// naming both folders it looked in and what makes a run resumable.
ResumeSources find_resume_sources(const std::filesystem::path& run_dir,
                                  const std::string& config_text);

}  // namespace geotrain::launcher
