#!/usr/bin/env python3
"""A PyTorch GPT on the King James Bible, trained across three emulated regions by geotrain.

    cmake --build build                       # the geotrain binary and the Python module
    PYTHONPATH=build/python python3 examples/torch_gpt_kjv.py [--tiny] [--set worker.rounds=40]

What runs: `geotrain serve examples/torch_gpt_kjv.yaml` starts one parameter server per region
and netsim (the WAN between them), and writes the run folder; this script then starts one leader
process per region. Each leader is an ordinary PyTorch training loop (AdamW, warmup + cosine,
gradient clipping) with two geotrain lines: OuterSync(...) and sync.step(). Every H steps the
region's compressed delta crosses netsim to every server and the new global parameters come
back. At the end `geotrain serve` writes summary.json, report.md and plots, as for a native run.

The model is scripts/torch_reference_gpt.py's Gpt: geotrain's GPT in PyTorch, with geotrain's
parameter names, so the servers' table is the native model's and the run is comparable with
`geotrain run` of the same config (docs/python.md, "Python vs native").
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see scripts/torch_reference_gpt.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import torch_reference_gpt as ref  # noqa: E402

from geotrain.deployment import find_binary, serve  # noqa: E402
from geotrain.torch import OuterSync  # noqa: E402

TINY = ["model.d_model=32", "model.layers=1", "model.heads=2", "model.seq_len=32",
        "worker.rounds=12", "worker.local_steps=2", "worker.warmup_steps=2", "worker.eval_every=6",
        "worker.data.eval_windows=16", "run.wan_profile=../configs/wan/lan.yaml",
        "run.progress_interval_s=2"]


# -- data: the native worker's split and validation windows (worker/data/text_corpus.cpp) ----------

def load_corpus(path, validation_fraction):
    data = np.fromfile(path, dtype=np.uint8)
    n_val = int(math.floor(len(data) * validation_fraction + 0.5))
    return data[:len(data) - n_val], data[len(data) - n_val:]


def validation_windows(val, window, count):
    span = len(val) - window
    steps = max(1, count - 1)
    starts = [i * span // steps for i in range(count)]
    return torch.from_numpy(np.stack([val[s:s + window] for s in starts]).astype(np.int64))


def random_batches(train, window, batch, seed):
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(train) - window, size=batch)
        yield torch.from_numpy(np.stack([train[s:s + window] for s in starts]).astype(np.int64))


def native_batches(config, region, steps, out):
    """The native worker's own batches for this region's rank 0 (`geotrain dump-batches`)."""
    subprocess.run([find_binary(), "dump-batches", "--config", config, "--region", region,
                    "--rank", "0", "--steps", str(steps), "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    for b in np.load(out):
        yield torch.from_numpy(b.astype(np.int64))


@torch.no_grad()
def evaluate(model, windows, chunk=16):
    loss_sum, correct, n = 0.0, 0, 0
    for i in range(0, len(windows), chunk):
        w = windows[i:i + chunk]
        logits = model(w[:, :-1])
        targets = w[:, 1:]
        loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                          targets.reshape(-1), reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        n += targets.numel()
    loss = loss_sum / n
    return dict(val_loss=loss, val_bpb=loss / math.log(2), val_accuracy=correct / n)


# -- one region's leader --------------------------------------------------------------------

def lead(args):
    ref.set_threads(1)
    tensors, metadata = ref.read_safetensors(args.init)
    model = ref.Gpt(**ref.config_from_metadata(metadata, args.init))
    ref.load_into(model, tensors, args.init)  # the native GPT's initial weights (same seed)
    named = ref.named_geotrain_parameters(model)  # geotrain's names: the servers' table

    sync = OuterSync(named, config=args.run_config, region=args.leader, model_name="gpt")
    s = sync.settings
    if s["lr_decay"] not in ("constant", "cosine"):
        sys.exit(f"{args.run_config}: worker.lr_decay {s['lr_decay']} is not in this example's "
                 "schedule (constant or cosine)")
    o = s["optimizer"]
    opt_args = argparse.Namespace(no_decay=o["no_decay"], weight_decay=o["weight_decay"],
                                  lr=s["lr"], beta1=o["beta1"], beta2=o["beta2"], eps=o["eps"],
                                  muon_lr=o["muon_lr"], muon_momentum=o["muon_momentum"],
                                  muon_nesterov=o["muon_nesterov"],
                                  muon_ns_steps=o["muon_ns_steps"],
                                  adamw_tensors=o["adamw_tensors"])
    # worker.optimizer.kind muon: Muon for the block matrices, AdamW for the rest; else AdamW.
    opt = ref.make_muon(model, opt_args) if o["kind"] == "muon" else ref.make_adamw(model, opt_args)

    train, val = load_corpus(s["data"]["path"], s["data"]["validation_fraction"])
    window = model.wpe.shape[0] + 1
    val_windows = validation_windows(val, window, s["data"]["eval_windows"])
    region_index = s["regions"].index(args.leader)
    if args.native_batches:
        batches = native_batches(args.run_config, args.leader, sync.total_steps,
                                 os.path.join(s["run_dir"], f"batches-{args.leader}.npy"))
    else:
        batches = random_batches(train, window, s["batch_size"], 1000 * s["seed"] + region_index)

    t0 = time.monotonic()
    for step in range(sync.total_steps):
        lr = ref.lr_at(step, s["lr"], s["warmup_steps"], sync.total_steps, s["min_lr"],
                       s["lr_decay"] == "cosine")
        loss, _ = ref.train_step(model, opt, next(batches), lr, s["max_grad_norm"])
        if sync.step(loss=loss, lr=lr):  # every H steps: the WAN exchange
            r = sync.rounds_done
            if s["eval_every"] and r % s["eval_every"] == 0 and r < sync.rounds:
                e = evaluate(model, val_windows)
                sync.log_eval(**e)
                print(f"{args.leader:>13}  round {r:4d}/{sync.rounds}  loss {loss:.4f}  "
                      f"val bpb {e['val_bpb']:.3f}  {time.monotonic() - t0:.0f} s", flush=True)
    final = evaluate(model, val_windows)
    sync.finish(**final)
    print(f"{args.leader:>13}  done: val bpb {final['val_bpb']:.3f}, next-byte accuracy "
          f"{100 * final['val_accuracy']:.2f}%", flush=True)


# -- the driver: servers, then one leader process per region ---------------------------------

def drive(args):
    overrides = (TINY if args.tiny else []) + args.set
    extra = [a for kv in overrides for a in ("--set", kv)]
    if args.no_plots:
        extra.append("--no-plots")
    servers = serve(args.config, out=args.out, extra_args=extra)
    print(f"run folder {servers.run_dir}", flush=True)
    try:
        init = os.path.join(servers.run_dir, "init.safetensors")
        subprocess.run([find_binary(), "export-init", "--config", servers.config, "--out", init],
                       check=True, stdout=subprocess.DEVNULL)
        leaders = []
        for region in _regions(servers):
            cmd = [sys.executable, os.path.abspath(__file__), "--leader", region, "--run-config",
                   servers.config, "--init", init]
            if args.native_batches:
                cmd.append("--native-batches")
            log = open(os.path.join(servers.run_dir, f"leader-{region}.log"), "w")
            leaders.append((region, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT),
                            log))
        failed = []
        for region, p, log in leaders:
            if p.wait() != 0:
                failed.append(region)
            log.close()
        if failed:
            for region in failed:
                with open(os.path.join(servers.run_dir, f"leader-{region}.log")) as f:
                    tail = f.read()[-2000:]
                print(f"leader of {region} failed:\n{tail}", file=sys.stderr)
            servers.stop()
            return 1
        return servers.wait()
    except BaseException:
        servers.stop()
        raise


def _regions(servers):
    with open(os.path.join(servers.run_dir, "endpoints.json")) as f:
        return json.load(f)["regions"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(HERE, "torch_gpt_kjv.yaml"))
    p.add_argument("--out", default="runs", help="parent folder of the run folder")
    p.add_argument("--tiny", action="store_true", help="a tiny model and run (CI, ~30 s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, as geotrain run --set (repeatable)")
    p.add_argument("--native-batches", action="store_true",
                   help="train on the native worker's batches (geotrain dump-batches): the run "
                        "then differs from `geotrain run` of the same config only in the code")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--leader", help=argparse.SUPPRESS)  # internal: run one region's leader
    p.add_argument("--run-config", help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.leader:
        lead(args)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
