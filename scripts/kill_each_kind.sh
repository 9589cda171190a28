#!/usr/bin/env bash
# kill -9 of each process kind, once, during a run (issue 13's fault target): runs CONFIG
# fault-free, then once per kind with a SIGKILL KILL_AT seconds after the start, under
# run.restart, and prints one table row per run from its summary.json: status, final accuracy
# (or validation bpb), the difference from the fault-free run, wall time, restarts and recovery.
# The kinds: a server, a region's leader, a non-leader worker, netsim (all of region REGION).
#
# Usage: scripts/kill_each_kind.sh [GEOTRAIN [CONFIG [KILL_AT_S [REGION]]]]
#   defaults: build/bin/geotrain configs/demo.yaml 15 eu-west; runs go under $OUT
#   (default runs/kill-each-kind/<kind>/).
set -euo pipefail
bin=${1:-build/bin/geotrain}
config=${2:-configs/demo.yaml}
at=${3:-15}
region=${4:-eu-west}
out=${OUT:-runs/kill-each-kind}
restart=(--set 'run.restart={max_restarts: 3, backoff_s: 1}' --set server.checkpoint.every=1)

# The pid of `process` in the run folder under $1, from events.jsonl's newest start line.
pid_of() {
  local events
  events=$(ls -d "$1"/*/ 2>/dev/null | head -1)events.jsonl
  [ -f "$events" ] || return 0
  python3 - "$events" "$2" <<'EOF'
import json, sys
pid = ""
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("event") == "start" and e.get("process") == sys.argv[2]:
        pid = e.get("pid", "")
print(pid)
EOF
}

run_one() {  # kind, process to kill ("" for none)
  local kind=$1 target=$2 dir="$out/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  "$bin" run "$config" --out "$dir" --no-plots "${restart[@]}" >"$dir/run.log" 2>&1 &
  local launcher=$!
  if [ -n "$target" ]; then
    sleep "$at"
    local pid
    pid=$(pid_of "$dir" "$target")
    if [ -n "$pid" ]; then
      kill -9 "$pid"
      echo "$kind: SIGKILL to $target (pid $pid) at ${at} s" >&2
    else
      echo "$kind: $target not found at ${at} s (the run ended?)" >&2
    fi
  fi
  wait "$launcher" || true
}

run_one none ""
run_one server "server-$region"
run_one leader "worker-$region-0"
run_one worker "worker-$region-1"
run_one netsim "netsim"

python3 - "$out" "$(dirname "$0")" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from metrics_schema import summary_key as k  # summary.json's keys (core/run_summary.json)
rows, ref = [], None
for kind in ["none", "server", "leader", "worker", "netsim"]:
    found = glob.glob(os.path.join(out, kind, "*", "summary.json"))
    if not found:
        print(f"| {kind} | no summary.json | | | | | |")
        continue
    s = json.load(open(found[0]))
    metric = s.get(k("final_test_accuracy"))
    bpb = s.get(k("final_val_bpb"))
    value = 100 * metric if metric is not None else bpb
    if kind == "none":
        ref = value
    faults = s.get(k("faults")) or []
    recovery = ", ".join(
        f"{f.get(k('process', 'fault'))}: restart {f.get(k('restart_seconds', 'fault')) or 0:.1f} s, "
        f"recovery {f.get(k('recovery_seconds', 'fault')) or 0:.1f} s" for f in faults) or "-"
    delta = "" if ref is None or value is None or kind == "none" else f"{value - ref:+.2f}"
    unit = "%" if metric is not None else " bpb"
    rows.append(f"| {kind} | {s.get(k('status'))} | {value:.2f}{unit} | {delta} | "
                f"{s.get(k('wall_seconds'), 0):.1f} | {s.get(k('restarts'), 0)} | {recovery} |")
print("| SIGKILL of | status | final | vs fault-free | wall (s) | restarts | restart / recovery |")
print("|---|---|---|---|---|---|---|")
print("\n".join(rows))
EOF
