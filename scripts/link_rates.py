#!/usr/bin/env python3
"""How full the emulated WAN links were while they carried the exchange: for a run folder whose
netsim wrote fine-grained statistics (`run.netsim_stats_interval_s: 0.05`), each directed link's
lanes (forward: leader to server, reverse: the replies) are cut into transfers, runs of intervals
with traffic separated by more than `--gap` intervals of silence (longer than the gap between one
window-limited flow's bursts, one RTT); a transfer's rate is its bytes over its span. Prints the
median transfer rate per lane, and the slowest lane's, against the link's bandwidth.

    scripts/link_rates.py RUN_DIR [--gap 5] [--min-mb 10] [--json]

The span counts whole intervals, so a rate is a lower bound by up to one interval (50 ms) per
transfer. docs/benchmarks.md, "Filling a long-haul link", reads it."""

import argparse
import collections
import json
import os
import statistics
import sys


def transfers(mbps, interval_s, gap, min_bytes):
    """Rates (Mbit/s) of the transfers in one lane's per-interval rates."""
    out, cur, silent = [], None, 0
    for i, m in enumerate(mbps + [0.0] * (gap + 1)):
        if m > 1:
            if cur is None:
                cur = [i, i, 0.0]
            cur[1], silent = i, 0
            cur[2] += m * 1e6 / 8 * interval_s
        elif cur is not None:
            silent += 1
            if silent > gap:
                first, last, nbytes = cur
                if nbytes >= min_bytes:
                    out.append(nbytes * 8 / ((last - first + 1) * interval_s) / 1e6)
                cur = None
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--gap", type=int, default=5, help="intervals of silence that end a transfer")
    p.add_argument("--min-mb", type=float, default=10, help="smaller transfers are left out")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    path = os.path.join(a.run_dir, "netsim.jsonl")
    if not os.path.exists(path):
        sys.exit(f"link_rates: no netsim.jsonl in {a.run_dir} (a run on a WAN profile writes it)")
    lanes, times = collections.defaultdict(list), collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            times[r["link"]].append(r["t_s"])
            for lane in ("forward", "reverse"):
                lanes[(r["link"], lane)].append(r[lane]["mbps"])
    interval = statistics.median(b - a for t in times.values() for a, b in zip(t, t[1:]))
    if interval > 0.2:
        print(f"link_rates: statistics every {interval:.2f} s are too coarse for transfers "
              "(run with run.netsim_stats_interval_s: 0.05)", file=sys.stderr)
    result = {}
    for key, mbps in sorted(lanes.items()):
        rates = transfers(mbps, interval, a.gap, a.min_mb * 1e6)
        if rates:
            result[f"{key[0]} {key[1]}"] = {"transfers": len(rates),
                                            "median_mbps": statistics.median(rates)}
    if not result:
        sys.exit("link_rates: no transfer of at least --min-mb on any link")
    slowest = min(result.items(), key=lambda kv: kv[1]["median_mbps"])
    if a.json:
        print(json.dumps({"interval_s": interval, "lanes": result,
                          "slowest": {"lane": slowest[0], **slowest[1]}}, indent=2))
        return
    for lane, r in result.items():
        print(f"{lane:36s} {r['transfers']:4d} transfers, median {r['median_mbps']:7.0f} Mbit/s")
    print(f"slowest lane: {slowest[0]}, {slowest[1]['median_mbps']:.0f} Mbit/s")


if __name__ == "__main__":
    main()
