#include "launcher/run/site_files.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <sstream>

#include "core/error.hpp"

namespace geotrain::launcher {

namespace {

// A Kubernetes object name part: lower-case letters, digits and '-', starting and ending with a
// letter or digit (RFC 1123 label).
bool dns_label(const std::string& s) {
  if (s.empty() || s.size() > 40 || s.front() == '-' || s.back() == '-') return false;
  for (char c : s)
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
      return false;
  return true;
}

uint32_t tcp_port(const std::string& endpoint, const std::string& region) {
  const auto colon = endpoint.rfind(':');
  uint32_t port = 0;
  const bool tcp = endpoint.rfind("tcp://", 0) == 0 && colon != std::string::npos && colon > 6;
  const char* first = endpoint.data() + colon + 1;
  const char* last = endpoint.data() + endpoint.size();
  const auto [end, ec] = tcp ? std::from_chars(first, last, port) : std::from_chars_result{};
  GT_REQUIRE(tcp && ec == std::errc{} && end == last && port > 0 && port <= 65535,
             "site: server.endpoints.{} is '{}', which is not tcp://HOST:PORT with a port "
             "1..65535 (a site's server listens on its own port)",
             region, endpoint);
  return port;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::istringstream in(text);
  std::string out, line;
  while (std::getline(in, line)) out += line.empty() ? "\n" : pad + line + "\n";
  return out;
}

std::string slurm_script(const SiteSpec& s) {
  const std::string sets = s.keys.empty() ? "" : "--set \"security.keys_dir=$site/keys\"";
  return fmt::format(R"SH(#!/bin/bash
#SBATCH --job-name=geotrain-{0}
#SBATCH --nodes=1
#SBATCH --ntasks={1}
# Region {0} of a geotrain deployment, one site of several (docs/deploy.md, "One site per
# cluster"), written by `geotrain site`. Submit it from this folder (sbatch slurm.sh), or set
# GEOTRAIN_SITE to the folder.
set -u
site=${{GEOTRAIN_SITE:-$SLURM_SUBMIT_DIR}}
bin={2}
sets=({3})
done_file="$site/.done-$SLURM_JOB_ID"
# The region's server, started again whenever it ends before the workers are done: it restores
# its checkpoint, and the leaders of every region rejoin it.
(
  while [ ! -e "$done_file" ]; do
    srun --ntasks=1 --exact --job-name=geotrain-server "$bin" server --config "$site/geo.yaml" \
         --region {0} "${{sets[@]}}"
    [ -e "$done_file" ] || sleep 1
  done
) &
# The region's workers in one step (rank = SLURM_PROCID within the region). When one dies,
# --kill-on-bad-exit ends the step, and all of them start again from their snapshots
# (worker.checkpoint.every) as a new generation, at most {4} tries in all.
status=1
for try in $(seq 0 {5}); do
  resume=()
  if [ "$try" -gt 0 ]; then resume=(--resume --generation "$try"); fi
  if srun --ntasks={6} --exact --kill-on-bad-exit=1 "$bin" worker --config "$site/geo.yaml" \
       --region {0} "${{sets[@]}}" "${{resume[@]}}"; then
    status=0
    break
  fi
  echo "geotrain-{0}: the workers' step failed (try $((try + 1)) of {4})" >&2
done
# The workers are done: SIGTERM to the server's step (it writes its final metrics and leaves;
# a signal to srun would cancel the step and kill the server only after KillWait), and the loop
# ends with it.
touch "$done_file"
for step in $(squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" | awk '$2 == "geotrain-server" {{print $1}}'); do
  scancel --signal=TERM "$step"
done
wait
rm -f "$done_file"
exit $status
)SH",
                     s.region, s.workers + 1, s.binary, sets, s.tries, s.tries - 1, s.workers);
}

std::string systemd_unit(const SiteSpec& s) {
  const std::string sets = s.keys.empty() ? "" : " --set security.keys_dir=/etc/geotrain/keys";
  return fmt::format(R"UNIT([Unit]
Description=geotrain server of region {0} (docs/deploy.md, "One site per cluster")
After=network-online.target
Wants=network-online.target

[Service]
# The config (geo.yaml) and the site's keys in /etc/geotrain; server.run_dir must be writable.
ExecStart={1} server --config /etc/geotrain/geo.yaml --region {0}{2}
# Restarted whenever it ends: it restores its checkpoint and the leaders rejoin it.
Restart=always
RestartSec=1
# SIGTERM: it writes its final metrics and leaves.
KillSignal=SIGTERM
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
)UNIT",
                     s.region, s.binary, sets);
}

std::string kubernetes(const SiteSpec& s, uint32_t port) {
  const std::string name = "geotrain-" + s.region;
  const bool keys = !s.keys.empty();
  std::string out = fmt::format(
      R"K8S(# Region {0} of a geotrain deployment on Kubernetes, written by `geotrain site`
# (docs/deploy.md, "One site per cluster"). kubectl apply -f k8s.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: {1}-config
data:
  geo.yaml: |
{2})K8S",
      s.region, name, indent(s.config_text, "    "));
  if (keys) {
    out += fmt::format(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {}-keys\ntype: "
        "Opaque\nstringData:\n",
        name);
    for (const auto& [file, text] : s.keys)
      out += fmt::format("  {}: \"{}\"\n", file, text.substr(0, text.find_last_not_of("\r\n") + 1));
  }
  const std::string sets = keys ? ", --set, security.keys_dir=/etc/geotrain/keys" : "";
  const std::string mounts = fmt::format(
      "        volumeMounts:\n"
      "        - {{name: config, mountPath: /etc/geotrain/geo.yaml, subPath: geo.yaml}}\n{}",
      keys ? "        - {name: keys, mountPath: /etc/geotrain/keys, readOnly: true}\n" : "");
  const std::string volumes = fmt::format(
      "      volumes:\n      - {{name: config, configMap: {{name: {}-config}}}}\n{}", name,
      keys ? fmt::format(
                 "      - {{name: keys, secret: {{secretName: {}-keys, defaultMode: 0400}}}}\n",
                 name)
           : "");
  out += fmt::format(R"K8S(---
# The server's address in server.endpoints must reach this Service from every region.
apiVersion: v1
kind: Service
metadata:
  name: {0}
spec:
  clusterIP: None
  selector: {{app: {0}-server}}
  ports:
  - {{name: server, port: {1}}}
---
# The region's server, restarted by the StatefulSet (it restores its checkpoint).
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {0}-server
spec:
  serviceName: {0}
  replicas: 1
  selector:
    matchLabels: {{app: {0}-server}}
  template:
    metadata:
      labels: {{app: {0}-server}}
    spec:
      containers:
      - name: server
        image: {2}
        command: [{3}, server, --config, /etc/geotrain/geo.yaml, --region, {4}, --endpoint, "tcp://*:{1}"{5}]
        ports:
        - {{name: server, containerPort: {1}}}
{6}{7}---
# The region's workers, rank = JOB_COMPLETION_INDEX within the region. A Gloo group cannot lose
# a member: a worker that dies fails the Job; apply it again with the next --generation to
# resume every worker from its snapshot (worker.checkpoint.every).
apiVersion: batch/v1
kind: Job
metadata:
  name: {0}-workers
spec:
  completionMode: Indexed
  completions: {8}
  parallelism: {8}
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: {2}
        command: [{3}, worker, --config, /etc/geotrain/geo.yaml, --region, {4}, --resume, --generation, "0"{5}]
{6}{7})K8S",
                     name, port, s.image, s.binary, s.region, sets, mounts, volumes, s.workers);
  return out;
}

}  // namespace

std::vector<std::string> site_key_files(const std::string& region,
                                        const std::vector<std::string>& regions) {
  std::vector<std::string> files{fmt::format("server-{}.secret", region),
                                 fmt::format("client-{}.secret", region)};
  for (const auto& r : regions) {
    files.push_back(fmt::format("server-{}.public", r));
    files.push_back(fmt::format("client-{}.public", r));
  }
  return files;
}

std::vector<SiteFile> site_files(const SiteSpec& spec) {
  GT_REQUIRE(dns_label(spec.region),
             "site: region '{}' must be a DNS label (lower-case letters, digits and '-', at most "
             "40): it names the site's Slurm job and Kubernetes objects",
             spec.region);
  GT_REQUIRE(spec.workers >= 1, "site: region {} has no workers", spec.region);
  GT_REQUIRE(spec.tries >= 1 && spec.tries <= 100, "site: --tries is {}, must be in [1, 100]",
             spec.tries);
  const uint32_t port = tcp_port(spec.endpoint, spec.region);
  return {{"slurm.sh", slurm_script(spec), true},
          {"geotrain-server.service", systemd_unit(spec), false},
          {"k8s.yaml", kubernetes(spec, port), false},
          {"geo.yaml", spec.config_text, false}};
}

}  // namespace geotrain::launcher
