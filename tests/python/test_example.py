"""examples/torch_gpt_kjv.py end to end at a tiny size: three Python leaders, geotrain servers
and netsim (`geotrain serve`), a falling loss, and the run folder of a native run."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

import _support

_support.import_geotrain()
if _support.import_torch() is None:
    _support.skip("torch is not installed (scripts/bootstrap.sh installs python3-torch)")
KJV = "/usr/local/share/geotrain/kjv.txt"
if not os.path.exists(KJV):
    _support.skip(f"the corpus {KJV} is missing (scripts/bootstrap.sh writes it)")
_support.binary()
EXAMPLE = os.path.join(_support.source_dir(), "examples", "torch_gpt_kjv.py")


def events(path, kind):
    with open(path) as f:
        return [e for e in map(json.loads, f) if e["event"] == kind]


class TinyExample(unittest.TestCase):
    def test_three_regions_train_and_leave_a_complete_run_folder(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, EXAMPLE, "--tiny", "--no-plots", "--out", tmp],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=150)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:])
            (run,) = glob.glob(os.path.join(tmp, "*-torch-gpt-kjv"))
            with open(os.path.join(run, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual(summary["status"], "completed")
            self.assertEqual(summary["rounds"], 12)
            self.assertEqual(set(summary["per_region"]), {"us-east", "eu-west", "ap-southeast"})
            self.assertGreater(summary["wan_wire_bytes_total"], 0)
            self.assertLess(summary["final_val_bpb"], 8.0)  # better than uniform bytes
            for region in ("us-east", "eu-west", "ap-southeast"):
                metrics = os.path.join(run, f"worker-{region}-0.metrics.jsonl")
                losses = [e["loss"] for e in events(metrics, "step")]
                self.assertEqual(len(losses), 24)
                first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
                self.assertLess(last, first - 0.3, f"{region}: loss {first:.3f} -> {last:.3f}")
                rounds = events(metrics, "round")
                self.assertEqual(len(rounds), 12)
                self.assertTrue(all(e["bytes_pushed"] > 0 for e in rounds))
                # the exchange fields as the native worker writes them (worker_events.cpp)
                for e in rounds:
                    self.assertEqual(e["largest_exchange_bytes"],
                                     e["bytes_pushed"] + e["bytes_pulled"])
                    self.assertEqual(e["exchanges"], 1)
                    self.assertEqual(e["deferred_shards"], 0)
                    self.assertEqual(e["merged_round"], e["round"])
            self.assertTrue(os.path.exists(os.path.join(run, "report.md")))
            self.assertIn("final validation bpb", r.stdout)


if __name__ == "__main__":
    unittest.main()
