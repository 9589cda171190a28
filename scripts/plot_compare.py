#!/usr/bin/python3
"""The plot of `geotrain compare`: existing run folders on one figure.

Usage: plot_compare.py OUT_DIR

Reads OUT_DIR/compare.csv (written by `geotrain compare`: one row per run, with `label`,
`run_dir` and `final_val_bpb`) and each run's worker metrics, and writes OUT_DIR/compare.png:
test accuracy (mean over regions) against time and against cumulative WAN payload bytes (all
regions), one line per run. Language models plot validation bits per byte (lower is better).

Uses Debian's python3-matplotlib with the Agg backend (the same curves as plot_sweep.py).
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_sweep import metric_curve, metric_of  # noqa: E402


def main(argv):
    if len(argv) != 2 or not os.path.isfile(os.path.join(argv[1], "compare.csv")):
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = argv[1]
    with open(os.path.join(out_dir, "compare.csv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    field, scale, ylabel, title = metric_of(rows)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in rows:
        if not r.get("run_dir") or not os.path.isdir(r["run_dir"]):
            continue
        ts, bs, values = metric_curve(r["run_dir"], field, scale)
        axes[0].plot(ts, values, marker="o", markersize=2, label=r["label"])
        axes[1].plot(bs, values, marker="o", markersize=2, label=r["label"])
    axes[0].set(xlabel="time (s)", ylabel=ylabel, title="against time")
    axes[1].set(xlabel="WAN payload, all regions (MB)", ylabel=ylabel, title="against WAN bytes")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "compare.png"), dpi=100, metadata={"Title": title})
    plt.close(fig)
    print(f"plot_compare.py: compare.png in {out_dir} ({len(rows)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
