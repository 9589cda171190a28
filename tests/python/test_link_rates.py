"""scripts/link_rates.py on netsim statistics written here, with closed-form rates: a lane that
carries 10 MB at 800 Mbit/s for 0.1 s, twice, and a window-limited flow whose bursts (1 Gbit/s
for one interval in five) form one transfer of a fifth of the rate."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import _support

SCRIPT = os.path.join(_support.source_dir(), "scripts", "link_rates.py")


def write_stats(folder, lanes, interval=0.05):
    """netsim.jsonl with one record per interval for link a->b: lanes[lane][i] Mbit/s."""
    n = max(len(v) for v in lanes.values())
    with open(os.path.join(folder, "netsim.jsonl"), "w") as f:
        for i in range(n):
            rec = {"link": "a->b", "t_s": (i + 1) * interval}
            for lane in ("forward", "reverse"):
                v = lanes.get(lane, [])
                rec[lane] = {"bytes": 0, "mbps": v[i] if i < len(v) else 0.0}
            f.write(json.dumps(rec) + "\n")


def run(folder, *args):
    out = subprocess.run([sys.executable, SCRIPT, folder, "--json", *args], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


class LinkRates(unittest.TestCase):
    def test_transfers_are_cut_at_silences_and_timed_over_their_span(self):
        with tempfile.TemporaryDirectory() as tmp:
            busy = [800.0, 800.0]  # 2 x 50 ms at 800 Mbit/s: 10 MB
            forward = busy + [0.0] * 10 + busy + [0.0] * 10
            burst = ([1000.0] + [0.0] * 4) * 8  # 6.25 MB a burst, one interval in five
            write_stats(tmp, {"forward": forward, "reverse": burst})
            r = run(tmp, "--min-mb", "5")
            self.assertEqual(r["lanes"]["a->b forward"]["transfers"], 2)
            self.assertAlmostEqual(r["lanes"]["a->b forward"]["median_mbps"], 800.0, places=6)
            # Gaps of 4 intervals do not end a transfer: 8 bursts over 36 intervals.
            self.assertEqual(r["lanes"]["a->b reverse"]["transfers"], 1)
            self.assertAlmostEqual(r["lanes"]["a->b reverse"]["median_mbps"], 8000.0 / 36,
                                   places=6)
            self.assertEqual(r["slowest"]["lane"], "a->b reverse")
            # With a shorter gap every burst is a transfer of its own, at the burst's rate.
            r = run(tmp, "--min-mb", "5", "--gap", "3")
            self.assertEqual(r["lanes"]["a->b reverse"]["transfers"], 8)
            self.assertAlmostEqual(r["lanes"]["a->b reverse"]["median_mbps"], 1000.0, places=6)

    def test_a_folder_without_statistics_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, SCRIPT, tmp], capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("no netsim.jsonl", out.stderr)


if __name__ == "__main__":
    unittest.main()
