// `geotrain run --resume RUN_DIR`: what a stopped run's folder says about how to start it again.
//
// The run folder's config.yaml is the resolved config every process read; resuming plans the
// deployment again from it (fresh loopback ports, the same run folder), so the user's netsim
// additions (seed, per-link overrides and faults), which the resolved config folded into
// netsim.yaml, are read back from netsim.yaml into a `netsim:` section. The servers then
// restore their newest verified checkpoints and the workers start with --resume (worker
// snapshots, worker/worker_checkpoint.hpp). Pure apart from reading the two files; InputError
// naming the folder or file when the folder is not a run folder.
#pragma once

#include <filesystem>
#include <string>

namespace geotrain::launcher {

// The config text to plan the resumed run from.
std::string resume_config_text(const std::filesystem::path& run_dir);

}  // namespace geotrain::launcher
