#!/usr/bin/python3
"""Comparison plots of a geotrain sweep folder (results.csv and each run's worker metrics).

Usage: plot_sweep.py SWEEP_DIR

Writes into SWEEP_DIR:
  sweep_accuracy_vs_time.png       test accuracy (mean over regions) against time, one line per run
  sweep_accuracy_vs_wan_bytes.png  the same against cumulative WAN payload bytes (all regions)
  sweep_bars.png                   final accuracy, WAN bytes and wall time per run
A sweep of language models plots validation bits per byte (lower is better) instead of accuracy,
under the same file names, and adds
  sweep_bpb_vs_tokens.png          validation bpb against training tokens (all regions), one
                                   colour per configuration (labels that differ only in a
                                   trailing "-sN" / "-seedN"), one line per seed
(from the leaders' eval events' `tokens`; runs from builds before 2026-11-26 lack it).

Uses Debian's python3-matplotlib with the Agg backend.
"""
import csv
import os
import sys

from metrics_schema import field  # core/metrics_events.json

VAL_BPB = field("eval", "val_bpb")
TOKENS = field("eval", "tokens")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_run import bytes_at, read_events, wan_curve  # noqa: E402
from seed_table import configuration  # noqa: E402


def metric_of(rows):
    """The metric a table's runs are judged on: (event field, scale, y label, what one plot is).
    A language model's rows have final_val_bpb values (the results' last columns)."""
    if any(r.get("final_val_bpb") for r in rows):
        return ("val_bpb", 1.0, "validation bits per byte, mean over regions (lower is better)",
                "validation bpb per run")
    return "test_accuracy", 100.0, "test accuracy, mean over regions (%)", "accuracy per run"


def metric_curve(run_dir, field, scale):
    """(times, WAN bytes of all regions so far, mean over regions of `field` x scale) at each
    evaluation."""
    regions = read_events(run_dir)
    evals = sorted((float(e.get("time", 0)), name, float(e[field]))
                   for name, ev in regions.items() for e in ev
                   if e.get("event") == "eval" and isinstance(e.get(field), (int, float)))
    curves = {name: wan_curve(ev) for name, ev in regions.items()}
    latest, ts, bs, values = {}, [], [], []
    for t, name, v in evals:
        latest[name] = v
        ts.append(t)
        bs.append(sum(bytes_at(c, t) for c in curves.values()) / 1e6)
        values.append(scale * sum(latest.values()) / len(latest))
    return ts, bs, values


def tokens_curve(run_dir):
    """(training tokens of all regions, mean over the regions that evaluated there of val_bpb)
    at each evaluation: regions evaluate at the same steps, so one point per token count."""
    at = {}
    for ev in read_events(run_dir).values():
        for e in ev:
            if (e.get("event") == "eval" and isinstance(e.get(VAL_BPB), (int, float))
                    and isinstance(e.get(TOKENS), int)):
                at.setdefault(e[TOKENS], []).append(float(e[VAL_BPB]))
    xs = sorted(at)
    return [x / 1e6 for x in xs], [sum(at[x]) / len(at[x]) for x in xs]


def plot_tokens(sweep_dir, rows):
    """sweep_bpb_vs_tokens.png; False when no run has token counts."""
    fig, ax = plt.subplots(figsize=(9, 5))
    colours, styles, drawn = {}, ["-", "--", ":", "-."], False
    for r in rows:
        if not r.get("run_dir") or not os.path.isdir(r["run_dir"]):
            continue
        xs, ys = tokens_curve(r["run_dir"])
        if not xs:
            continue
        config = configuration(r["label"])
        first = config not in colours
        colours.setdefault(config, f"C{len(colours) % 10}")
        seeds = sum(1 for k in rows[:rows.index(r)] if configuration(k["label"]) == config)
        ax.plot(xs, ys, color=colours[config], linestyle=styles[seeds % len(styles)],
                linewidth=1.2, label=config if first else None)
        drawn = True
    if drawn:
        ax.set(xlabel="training tokens, all regions (millions)",
               ylabel="validation bits per byte (lower is better)",
               title="validation bpb against tokens (one line per seed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(sweep_dir, "sweep_bpb_vs_tokens.png"), dpi=100)
    plt.close(fig)
    return drawn


def main(argv):
    if len(argv) != 2 or not os.path.isfile(os.path.join(argv[1], "results.csv")):
        print(__doc__, file=sys.stderr)
        return 2
    sweep_dir = argv[1]
    with open(os.path.join(sweep_dir, "results.csv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    field, scale, ylabel, title = metric_of(rows)
    lm = field == "val_bpb"
    for use_bytes in (False, True):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in rows:
            if not r.get("run_dir") or not os.path.isdir(r["run_dir"]):
                continue
            ts, bs, values = metric_curve(r["run_dir"], field, scale)
            ax.plot(bs if use_bytes else ts, values, marker="o", markersize=2, label=r["label"])
        ax.set(xlabel="WAN payload, all regions (MB)" if use_bytes else "time (s)",
               ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        # The file names stay for both kinds of model, so results.md's links hold.
        name = "sweep_accuracy_vs_wan_bytes.png" if use_bytes else "sweep_accuracy_vs_time.png"
        fig.savefig(os.path.join(sweep_dir, name), dpi=100, metadata={"Title": title})
        plt.close(fig)

    tokens_plot = lm and plot_tokens(sweep_dir, rows)
    labels = [r["label"] for r in rows]

    def col(key, scale=1.0):
        return [float(r[key]) * scale if r.get(key) else 0.0 for r in rows]

    final = (("final validation bpb (lower is better)", col("final_val_bpb")) if lm
             else ("final test accuracy (%)", col("final_test_accuracy", 100)))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (title, values) in zip(axes, [final,
                                          ("WAN payload (MB)", col("wan_bytes_total", 1e-6)),
                                          ("wall time (s)", col("wall_seconds"))]):
        ax.bar(range(len(labels)), values, color="tab:blue")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(sweep_dir, "sweep_bars.png"), dpi=100, metadata={"Title": final[0]})
    plt.close(fig)
    print(f"plot_sweep.py: {4 if tokens_plot else 3} plots in {sweep_dir} "
          f"({'validation bpb' if lm else 'test accuracy'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
