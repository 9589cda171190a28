// One site per cluster: the files a site needs to run its region of a deployment with its own
// scheduler and restart policy (docs/deploy.md, "One site per cluster"), written by
// `geotrain site`:
//   slurm.sh                a batch script: the region's server under a restart loop (it restores
//                           its checkpoint), its workers in one step under --kill-on-bad-exit,
//                           started again from their snapshots (--resume, a new generation) up
//                           to `tries` times;
//   geotrain-server.service a systemd unit for the region's server (Restart=always);
//   k8s.yaml                Kubernetes: a ConfigMap (the config), a Secret (the region's CURVE
//                           keys, when the deployment has them), a headless Service and a
//                           StatefulSet for the server, an indexed Job for the workers;
//   geo.yaml                the deployment config, the same at every site.
// Every process finds its place from --region and its launcher's rank (SLURM_PROCID,
// JOB_COMPLETION_INDEX, ...) within the region. Pure text; the caller writes the files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace geotrain::launcher {

struct SiteSpec {
  std::string region;
  uint32_t workers = 1;             // the region's worker processes
  std::string endpoint;             // the region's server (server.endpoints), tcp://HOST:PORT
  std::string config_text;          // the deployment config, as written
  std::string binary = "geotrain";  // the geotrain binary at the site
  uint32_t tries = 3;               // the workers' step, started again at most tries - 1 times
  std::string image = "geotrain:latest";  // the container image (Kubernetes)
  // CURVE: the site's key files (site_key_files) as {name, text}; empty: no CURVE. Slurm reads
  // them from <site>/keys, systemd from /etc/geotrain/keys, Kubernetes from the Secret.
  std::vector<std::pair<std::string, std::string>> keys;
};

struct SiteFile {
  std::string name;
  std::string text;
  bool executable = false;
};

// The files above, in that order. InputError for a region name that is not a DNS label (it names
// Kubernetes objects), an endpoint that is not tcp://HOST:PORT, no workers or no tries.
std::vector<SiteFile> site_files(const SiteSpec& spec);

// The key files a site of `region` holds, from the keygen folder's names: its server's and its
// clients' secrets, and every region's public keys (docs/deploy.md, "Encryption and
// authentication").
std::vector<std::string> site_key_files(const std::string& region,
                                        const std::vector<std::string>& regions);

}  // namespace geotrain::launcher
