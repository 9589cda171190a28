#!/usr/bin/env python3
"""Mean and spread over seeds of a sweep's results.csv.

Points whose labels differ only in a trailing "-sN" or "-seedN" (seed N) are one configuration. For each,
prints the mean and the range (min..max) of final accuracy (or validation bits per byte),
time to target, wall time and WAN bytes, the accuracy delta against the baseline
configuration's mean, the traffic reduction against it, and the largest single exchange
(from the leaders' round events: streaming divides it by the fragment count).

    scripts/seed_table.py runs/sweeps/overlap/results.csv [--baseline fp32-sync] [--lan fp32-sync-lan]

With --lan, also time to target over that configuration's mean (the LAN control).

"train-only time" is the time to target without the evaluations before it: the leaders evaluate
on the caller's time (every worker.eval_every rounds), which adds the same seconds per
evaluation to every configuration and so pulls ratios towards 1 when evaluations are frequent.
From the leaders' metrics (each evaluation's length is the time from the event before it to its
own), per region the first evaluation at the target (--target, default 0.85 accuracy; for a
language model a val bpb at or below --target), minus the evaluations up to it; the run's time is
the largest over its regions, on the workers' clocks (from their start, so about half a second
earlier than the launcher's time to target).
Standard library only.
"""
import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

from metrics_schema import field  # core/metrics_events.json

LARGEST_EXCHANGE = field("round", "largest_exchange_bytes")


def configuration(label):
    """A point's configuration: its label without a trailing seed suffix ("-s2", "-seed2")."""
    return re.sub(r"[-_]s(eed)?\d+$", "", label)


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
            size = event.get(LARGEST_EXCHANGE)
            if size is not None:
                best = size if best is None else max(best, size)
    return best


def train_only_time(run_dir, target, lm):
    """Time to target without evaluation time (see the module text), or None."""
    worst = None
    for f in Path(run_dir).glob("worker-*-0.metrics.jsonl"):
        previous, in_eval, reached = None, 0.0, None
        for line in f.open():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = event.get("time")
            if event.get("event") == "eval" and t is not None and previous is not None:
                in_eval += t - previous
                value = event.get(field("eval", "val_bpb") if lm else field("eval", "test_accuracy"))
                if value is not None and (value <= target if lm else value >= target):
                    reached = t - in_eval
                    break
            if t is not None:
                previous = t
        if reached is None:
            return None
        worst = reached if worst is None else max(worst, reached)
    return worst


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
    ap.add_argument("--target", type=float,
                    help="accuracy (0-1) or val bpb for the train-only time (default 0.85; none for a LM)")
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
        name = configuration(row["label"])
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
    target = args.target if args.target is not None else (None if lm else 0.85)
    train_only = {}  # label -> seconds
    if target is not None:
        for r in rows:
            if r.get("status") == "completed" and r.get("run_dir"):
                train_only[r["label"]] = train_only_time(r["run_dir"], target, lm)
    lan_train = None
    if args.lan and target is not None:
        vals = [train_only.get(r["label"]) for r in groups.get(args.lan, [])]
        vals = [v for v in vals if v is not None]
        lan_train = statistics.fmean(vals) if vals else None

    unit = "val bpb" if lm else "accuracy %"
    head = ["configuration", "seeds", f"final {unit}", "delta" + (" bpb" if lm else " pp"),
            "time to target s", "wall s", "WAN MB", "less traffic", "largest exchange MB"]
    if lan_time:
        head.append("time / LAN")
    if target is not None:
        head.append("train-only time s")
        if lan_train:
            head.append("train-only / LAN")
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
        if target is not None:
            t = [train_only.get(r["label"]) for r in done]
            cells.append(spread(t, "{:.1f}"))
            if lan_train:
                t = [v for v in t if v is not None]
                cells.append(f"{statistics.fmean(t) / lan_train:.2f}" if t else "n/a")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
