#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md ("GPT on a GPU") in one call on a lent GPU machine:
#   ../shared/tools/gpu-bundle build-portable      # here, after building (portable preset)
#   device run, carry [".gpu"]:  bash .gpu/run.sh 'bash scripts/gpu_check.sh build-portable tests bench'
# Parts (default: all, in this order: tests train torch bench util):
#   tests  ctest -L gpu (every op of GptCuda against its CPU twin, resident training, NCCL, codecs)
#   bench  geotrain bench codecs --no-cpu (device copy bandwidth, every codec's encode/decode)
#   profile  ncu: every kernel's duration in one GPT-2 124M bf16 step (batch 8), as CSV
#   codecprof  ncu: the onebit and top-k encoders' kernels in `bench codecs` (time, DRAM bytes and
#            throughput, occupancy, registers), as CSV
#   sanitize compute-sanitizer memcheck over the codec suite's top-k and EF-decay cases
#   train  geotrain bench train: GPT-2 124M, T 1024, bf16, device-resident
#   torch  the PyTorch side of the same step: eager, then torch.compile (one JSON line each)
#   util   3 regions x 1 GPU worker of the 37M-parameter MLP on global-3: compute utilization
#   leader geotrain bench leader: the leader's push and pull on the host and on the device (GPT-2
#          124M's parameter count; one segment, then 150 as tensor-aligned chunks make)
#   samerun one region, one GPU worker of the demo's MLP, 6 rounds, with the leader's overlap rule
#          on the device and on the host (worker.leader_on_device): the two runs' final parameters
#          must be the same bits (their sha256 are printed, and the part fails when they differ)
#   gptutil 3 regions x 1 GPU worker of GPT-2 124M (bf16, AdamW, onebit both ways, H = 100) on
#          global-3: compute utilization and every leader's round (compute, wait and its parts:
#          the exchange's, the boundary's start, merge and commit; push, pull) from its metrics
#          file; $GT_ROUNDS rounds (3), overlap $GT_OVERLAP (eager), the KJV text at $GT_KJV
#          (/usr/share/datasets/kjv.txt), worker.leader_on_device $GT_LEADER_ON_DEVICE (true)
# Each part's log goes to $OUT/<part>.log (at most 8 files come back); the last lines printed are
# a short table. Every step has its own timeout so that one hang does not cost the call.
set -u
build=${1:-build}
shift || true
parts=${*:-tests train torch bench util}
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
bin=$build/bin/geotrain
summary=()

part() {  # part NAME TIMEOUT_S CMD...: runs CMD with a timeout, its output appended to NAME.log
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s%N)
  echo "== $name: $*" | tee -a "$out/$name.log"
  timeout -k 5 "$limit" "$@" >> "$out/$name.log" 2>&1
  rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  summary+=("$(printf '%-6s rc=%-4s %5d.%01d s  %s' "$name" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) "$*")")
  tail -n 25 "$out/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
  > "$out/device.log" 2>&1
date -u +%FT%TZ >> "$out/device.log"
cat "$out/device.log"

for p in $parts; do
  case $p in
    tests)
      part tests 300 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 150 ;;
    bench)  # the CUDA path only: the CPU's figures come from the 2-core machine
      part bench 120 "$bin" bench codecs --no-cpu --elements 67108864 --repeat 10 ;;
    profile)  # each kernel's time in one GPT-2 step (ncu, one metric: one replay pass a kernel)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
      part profile 200 "$ncu" --csv --clock-control none --metrics gpu__time_duration.sum \
        "$bin" bench train --device cuda --precision bf16 --model gpt2-124m --batch 8 \
        --warmup-steps 0 --steps 1 ;;
    codecprof)  # each codec kernel's bytes and time (ncu, 64M elements, one timed repeat)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
      part codecprof 150 "$ncu" --csv --clock-control none \
        --kernel-name regex:'onebit_encode|add_into|sample_keys|candidate_keys|digit_histogram|pick_digit|tie_flags|keep_flags|gather_values|write_varints|summarise|zero_selected|Device' \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
        "$bin" bench codecs --no-cpu --elements 67108864 --repeat 1 ;;
    sanitize)
      part sanitize 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$build/tests/test_kernels_gpu" -tc='topk*,EF decay*' ;;
    train)
      part train 120 "$bin" bench train --device cuda --precision bf16 --model gpt2-124m \
        --batch 16 --steps 10 --json
      part train 120 "$bin" bench train --device cuda --precision bf16 --model gpt2-124m \
        --batch 8 --steps 10 --json ;;
    torch)
      part torch 240 python3 scripts/torch_reference_gpt.py --bench --device cuda --precision bf16 \
        --compile --preset gpt2-124m --batch 16 --steps 10 --json ;;
    util)
      for overlap in false eager; do
        part util 120 "$bin" run configs/demo.yaml --no-plots --out "$out/runs" \
          --set model.arch=784-4096-4096-4096-10 --set model.critical=[] \
          --set worker.device=cuda --set worker.workers_per_region=1 \
          --set worker.local_steps=32 --set worker.rounds=8 --set worker.eval_every=0 \
          --set worker.overlap=$overlap --set run.name=mlp37m-$overlap
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print({k: d.get(k) for k in
              ("status", "rounds", "wall_seconds", "compute_utilization", "wan_wire_bytes_total")})' \
          "$out"/runs/*mlp37m-$overlap/summary.json 2>&1 | tee -a "$out/util.log"
      done
      rm -rf "$out/runs" ;;
    samerun)
      for dev in true false; do
        part samerun 120 "$bin" run configs/demo.yaml --no-plots --out "$out/runs" \
          --set "regions=[us-east]" --set worker.device=cuda --set worker.workers_per_region=1 \
          --set worker.rounds=6 --set worker.eval_every=0 --set worker.leader_on_device=$dev \
          --set run.name=same-$dev
      done
      grep -h "overlap rule runs" "$out"/runs/*same-true/worker-*.log | tee -a "$out/samerun.log"
      sha256sum "$out"/runs/*same-*/params-us-east.f32 | tee -a "$out/samerun.log"
      n=$(sha256sum "$out"/runs/*same-*/params-us-east.f32 | awk '{print $1}' | sort -u | wc -l)
      summary+=("samerun: $n distinct final parameter files (1: the same bits)")
      rm -rf "$out/runs" ;;
    leader)
      part leader 100 "$bin" bench leader --repeat 5
      part leader 100 "$bin" bench leader --repeat 3 --segments 150 ;;
    gptutil)
      part gptutil 240 "$bin" run configs/lm-demo.yaml --no-plots --out "$out/runs" \
        --set model.preset=gpt2-124m --set worker.device=cuda --set worker.precision=bf16 \
        --set worker.workers_per_region=1 --set worker.batch_size=8 \
        --set worker.local_steps=100 --set worker.rounds=${GT_ROUNDS:-3} --set worker.eval_every=0 \
        --set worker.fragments=1 --set worker.overlap=${GT_OVERLAP:-eager} --set worker.fragment_delay=${GT_DELAY:-100} \
        --set "worker.optimizer={kind: adamw, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}" \
        --set worker.critical_codec=onebit --set worker.noncritical_codec=onebit \
        --set server.downlink_codec=onebit --set "worker.data.path=${GT_KJV:-/usr/share/datasets/kjv.txt}" \
        --set worker.leader_on_device=${GT_LEADER_ON_DEVICE:-true} --set run.name=gpt2-util
      python3 - "$out"/runs/*gpt2-util <<'PY' 2>&1 | tee -a "$out/gptutil.log"
import glob, json, sys
run = sys.argv[1]
s = json.load(open(run + "/summary.json"))
print({k: s.get(k) for k in ("status", "rounds", "wall_seconds", "compute_utilization")})
# Per round: its wall time (from the previous round event), and what is neither compute, comm nor
# the leader's wait (the host mirror's copies at the exchange, the data, the log): the round
# boundary's cost beside wait_s.
for path in sorted(glob.glob(run + "/worker-*.metrics.jsonl")):
    last = None
    for line in open(path):
        e = json.loads(line)
        if e.get("event") == "round":
            row = {k: e.get(k) for k in ("region", "round", "compute_s", "comm_s", "wait_s", "merge_wait_s",
                                         "boundary_start_s", "boundary_merge_s", "boundary_commit_s",
                                         "push_s", "pull_s", "gate_wait_s", "merged_round")}
            if last is not None and e.get("steps"):
                wall = e["time"] - last
                row["wall_s"] = round(wall, 3)
                row["other_s"] = round(wall - e["compute_s"] - e["comm_s"] - e["wait_s"], 3)
            last = e["time"]
            print(row)
PY
      rm -rf "$out/runs" ;;
    *) echo "gpu_check: unknown part '$p' (tests, train, torch, bench, profile, codecprof, sanitize, util, samerun, leader, gptutil)" >&2; exit 2 ;;
  esac
done

echo
echo "== summary ($(date -u +%T))"
printf '%s\n' "${summary[@]}"
