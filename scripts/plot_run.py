#!/usr/bin/python3
"""Plots of one geotrain run folder, from the workers' metrics JSONL (docs/run-folder.md).

Usage: plot_run.py RUN_DIR

Writes into RUN_DIR:
  loss_accuracy_vs_time.png       training loss and test accuracy against the run's time, per
                                  region, with the run's target as a dashed line (a language
                                  model: validation bits per byte instead)
  loss_accuracy_vs_wan_bytes.png  the same against cumulative WAN payload bytes of the region
  staleness_histogram.png         staleness of the leaders' rounds
  round_time_split.png            time per round: compute, communication (AllReduce), waiting;
                                  one scale for every region

Uses Debian's python3-matplotlib (scripts/bootstrap.sh installs it) with the Agg backend; no
display needed. Exits 0 with a note when the folder has no worker metrics yet.
"""
import bisect
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from metrics_schema import field, summary_key  # noqa: E402  (core/*.json)

# The worker events' fields these plots read, checked against the schema at import.
BYTES_PUSHED = field("round", "bytes_pushed")
BYTES_PULLED = field("round", "bytes_pulled")
STALENESS = field("round", "staleness")
LOSS = field("step", "loss")
TEST_ACCURACY = field("eval", "test_accuracy")
VAL_BPB = field("eval", "val_bpb")


def jsonl(path):
    """The JSON objects of a JSONL file, skipping a line a writer left unfinished."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a writer that died mid-line
            if isinstance(e, dict):
                out.append(e)
    return out


def process_starts(run_dir):
    """{process: [launcher time of each start]} from events.jsonl (empty without one)."""
    starts = {}
    path = os.path.join(run_dir, "events.jsonl")
    if os.path.exists(path):
        for e in jsonl(path):
            if e.get("event") == "start" and isinstance(e.get("time"), (int, float)):
                starts.setdefault(e.get("process"), []).append(float(e["time"]))
    return starts


def read_events(run_dir):
    """Leader (rank 0) events per region: {region: [event, ...]} in file order, each `time` on
    the run's clock (the launcher's, as summary.json's times): a worker's clock starts at its
    process's start, which events.jsonl records (each restart appends a `start` line)."""
    regions = {}
    starts = process_starts(run_dir)
    for path in sorted(glob.glob(os.path.join(run_dir, "worker-*.metrics.jsonl"))):
        process = os.path.basename(path)[:-len(".metrics.jsonl")]
        generation, offset = 0, 0.0
        for e in jsonl(path):
            if e.get("event") == "start" and generation < len(starts.get(process, [])):
                offset = starts[process][generation]
                generation += 1
            if e.get("rank", 0) != 0 or "region" not in e:
                continue
            if isinstance(e.get("time"), (int, float)):
                e["time"] = float(e["time"]) + offset
            regions.setdefault(e["region"], []).append(e)
    return regions


def run_target(run_dir):
    """(value, kind) of the run's target from summary.json, or None."""
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    for key in (summary_key("target_accuracy"), summary_key("target_val_bpb")):
        if isinstance(s.get(key), (int, float)):
            return float(s[key]), key
    return None


def series(events, kind, field):
    xs, ys = [], []
    for e in events:
        if e.get("event") == kind and isinstance(e.get(field), (int, float)):
            xs.append(float(e.get("time", 0.0)))
            ys.append(float(e[field]))
    return xs, ys


def wan_curve(events):
    """(times, cumulative WAN payload bytes) at each round event."""
    ts, total, out = [], 0.0, []
    for e in events:
        if e.get("event") == "round":
            total += float(e.get(BYTES_PUSHED, 0)) + float(e.get(BYTES_PULLED, 0))
            ts.append(float(e.get("time", 0.0)))
            out.append(total)
    return ts, out


def bytes_at(curve, t):
    ts, bs = curve
    i = bisect.bisect_right(ts, t)
    return bs[i - 1] if i > 0 else 0.0


def smooth(ys, n=10):
    out, acc = [], []
    for y in ys:
        acc.append(y)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def is_language_model(regions):
    """A language model's leaders evaluate val_bpb (docs/run-folder.md), a classifier's test_accuracy."""
    return any(e.get("event") == "eval" and isinstance(e.get(VAL_BPB), (int, float))
               for events in regions.values() for e in events)


# The evaluation metric each kind of model is plotted on: (eval field, scale, axis label, title).
ACCURACY = (TEST_ACCURACY, 100.0, "test accuracy (%)", "test accuracy")
BPB = (VAL_BPB, 1.0, "validation bits per byte (lower is better)",
       "validation bits per byte (bpb)")


def plot_curves(regions, run_dir, use_bytes, target=None):
    field, scale, ylabel, title = BPB if is_language_model(regions) else ACCURACY
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(11, 4))
    if target is not None:
        value, key = target
        wanted = {"target_accuracy": TEST_ACCURACY, "target_val_bpb": VAL_BPB}[key]
        shown = scale * value if wanted == field else None
        if shown is not None:
            ax_metric.axhline(shown, color="black", linestyle="--", linewidth=1,
                              label=f"target {shown:g}{'%' if scale == 100.0 else ' bpb'}")
    for name, events in sorted(regions.items()):
        curve = wan_curve(events)
        t, loss = series(events, "step", LOSS)
        te, metric = series(events, "eval", field)
        if use_bytes:
            t = [bytes_at(curve, x) / 1e6 for x in t]
            te = [bytes_at(curve, x) / 1e6 for x in te]
        ax_loss.plot(t, smooth(loss), label=name)
        ax_metric.plot(te, [scale * m for m in metric], marker="o", markersize=3, label=name)
    xlabel = ("WAN payload sent + received by the region (MB)" if use_bytes
              else "time since the run started (s)")
    ax_loss.set(xlabel=xlabel, ylabel="training loss (leader, 10-step mean)", title="loss")
    ax_metric.set(xlabel=xlabel, ylabel=ylabel, title=title)
    for ax in (ax_loss, ax_metric):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    # The file names stay for both kinds of model, so report.md's links hold.
    name = "loss_accuracy_vs_wan_bytes.png" if use_bytes else "loss_accuracy_vs_time.png"
    fig.savefig(os.path.join(run_dir, name), dpi=100,
                metadata={"Title": f"training loss and {title} vs {'WAN bytes' if use_bytes else 'time'}"})
    plt.close(fig)


def plot_staleness(regions, run_dir):
    fig, ax = plt.subplots(figsize=(6, 4))
    values = {n: [int(e[STALENESS]) for e in ev if e.get("event") == "round" and
                  isinstance(e.get(STALENESS), (int, float))] for n, ev in sorted(regions.items())}
    top = max([max(v) for v in values.values() if v] + [0])
    bins = [b - 0.5 for b in range(top + 2)]
    data = [v for v in values.values()]
    if any(data):
        ax.hist(data, bins=bins, label=list(values.keys()), rwidth=0.9)
        ax.legend()
    if top == 0 and any(data):
        # A single bar says less than a sentence: every round merged at staleness 0.
        ax.text(0.5, 0.5, "every round at staleness 0\n(synchronous rounds)", ha="center",
                va="center", transform=ax.transAxes, fontsize=12,
                bbox={"facecolor": "white", "alpha": 0.8})
    ax.set(xlabel="staleness (rounds)", ylabel="rounds", title="staleness of the leaders' rounds")
    ax.set_xticks(range(top + 1))
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "staleness_histogram.png"), dpi=100)
    plt.close(fig)


def plot_round_split(regions, run_dir):
    names = sorted(regions)
    # One x and one y scale for every region, so that a region that waits longer looks it.
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.6 * len(names)), squeeze=False,
                             sharex=True, sharey=True)
    for ax, name in zip(axes[:, 0], names):
        rounds = [e for e in regions[name] if e.get("event") == "round"]
        x = [int(e.get("round", i)) for i, e in enumerate(rounds)]
        parts = [("compute (forward, backward)", "compute_s", "tab:blue"),
                 ("optimizer step", "optimizer_s", "tab:green"),
                 ("communication (AllReduce)", "comm_s", "tab:orange"),
                 ("waiting (WAN exchange)", "wait_s", "tab:red")]
        bottom = [0.0] * len(rounds)
        for label, key, color in parts:
            ys = [float(e.get(key, 0.0)) for e in rounds]
            ax.bar(x, ys, bottom=bottom, label=label, color=color, width=1.0)
            bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set(ylabel="seconds", title=f"{name}: time per round")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("round")
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "round_time_split.png"), dpi=100)
    plt.close(fig)


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    run_dir = argv[1]
    regions = read_events(run_dir)
    if not regions:
        print(f"plot_run.py: no worker metrics in {run_dir}; no plots", file=sys.stderr)
        return 0
    target = run_target(run_dir)
    plot_curves(regions, run_dir, use_bytes=False, target=target)
    plot_curves(regions, run_dir, use_bytes=True, target=target)
    plot_staleness(regions, run_dir)
    plot_round_split(regions, run_dir)
    metric = "validation bpb" if is_language_model(regions) else "test accuracy"
    print(f"plot_run.py: 4 plots in {run_dir} (training loss and {metric})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
