#!/usr/bin/env python3
"""Mean and spread over seeds of a sweep's results.csv.

Points whose labels differ only in a trailing "-sN" (seed N) are one configuration. For each,
prints the mean and the range (min..max) of final accuracy (or validation bits per byte),
time to target, wall time and WAN bytes, the accuracy delta against the baseline
configuration's mean, the traffic reduction against it, and the largest single exchange
(from the leaders' round events: streaming divides it by the fragment count).

    scripts/seed_table.py runs/sweeps/overlap/results.csv [--baseline fp32-sync] [--lan fp32-sync-lan]

With --lan, also time to target over that configuration's mean (the LAN control).
Standard library only.
"""
import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def largest_exchange(run_dir):
    """The largest single exchange (bytes pushed + pulled) any leader logged, or None."""
    best = None
    for f in Path(run_dir).glob("worker-*-0.metrics.jsonl"):
        for line in f.open():
            if '"round"' not in line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            size = event.get("largest_exchange_bytes")
            if size is not None:
                best = size if best is None else max(best, size)
    return best


def spread(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return fmt.format(mean)
    return f"{fmt.format(mean)} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("results", help="a sweep's results.csv")
    ap.add_argument("--baseline", help="configuration the deltas are against (default: the first)")
    ap.add_argument("--lan", help="configuration whose mean time to target is the LAN control")
    args = ap.parse_args()

    path = Path(args.results)
    if not path.is_file():
        sys.exit(f"seed_table: {path} is not a file (a sweep's results.csv)")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or "label" not in rows[0]:
        sys.exit(f"seed_table: {path} has no rows with a 'label' column")

    groups = {}
    for row in rows:
        name = re.sub(r"-s\d+$", "", row["label"])
        groups.setdefault(name, []).append(row)
    lm = any(num(r.get("final_val_bpb")) is not None for r in rows)
    metric = "final_val_bpb" if lm else "final_test_accuracy"
    scale = 1.0 if lm else 100.0

    def mean_of(name, key, s=1.0):
        vals = [num(r.get(key)) for r in groups.get(name, [])]
        vals = [v * s for v in vals if v is not None]
        return statistics.fmean(vals) if vals else None

    base = args.baseline or next(iter(groups))
    if base not in groups:
        sys.exit(f"seed_table: no configuration named '{base}' (have: {', '.join(groups)})")
    base_metric = mean_of(base, metric, scale)
    base_bytes = mean_of(base, "wan_bytes_total")
    lan_time = mean_of(args.lan, "time_to_target_seconds") if args.lan else None

    unit = "val bpb" if lm else "accuracy %"
    head = ["configuration", "seeds", f"final {unit}", "delta" + (" bpb" if lm else " pp"),
            "time to target s", "wall s", "WAN MB", "less traffic", "largest exchange MB"]
    if lan_time:
        head.append("time / LAN")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, rs in groups.items():
        done = [r for r in rs if r.get("status") == "completed"]
        m = [num(r.get(metric)) for r in done]
        m = [v * scale for v in m if v is not None]
        times = [num(r.get("time_to_target_seconds")) for r in done]
        mb = [num(r.get("wan_bytes_total")) for r in done]
        mb = [v / 1e6 for v in mb if v is not None]
        mean_m = statistics.fmean(m) if m else None
        delta = f"{mean_m - base_metric:+.3f}" if (mean_m is not None and base_metric is not None) else "n/a"
        mean_b = statistics.fmean(mb) if mb else None
        less = f"{100 * (1 - mean_b * 1e6 / base_bytes):.1f}%" if (mean_b and base_bytes) else "n/a"
        largest = [largest_exchange(r["run_dir"]) for r in done if r.get("run_dir")]
        largest = [v / 1e6 for v in largest if v is not None]
        cells = [name, f"{len(done)}/{len(rs)}", spread(m, "{:.3f}" if lm else "{:.2f}"), delta,
                 spread(times, "{:.1f}"), spread([num(r.get("wall_seconds")) for r in done], "{:.1f}"),
                 spread(mb, "{:.1f}"), less, spread(largest, "{:.2f}")]
        if lan_time:
            t = [v for v in times if v is not None]
            cells.append(f"{statistics.fmean(t) / lan_time:.2f}" if t else "n/a")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
