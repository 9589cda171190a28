"""geotrain.torch.OuterSync against real servers (`geotrain serve`, worker.external: true, with
netsim between the regions): two regions, closed-form parameter values after each round, the
run folder the launcher summarizes, and the errors a user meets first."""

import json
import os
import tempfile
import threading
import time
import unittest

import numpy as np

import _support

geotrain = _support.import_geotrain()
torch = _support.import_torch()
if torch is None:
    _support.skip("torch is not installed (scripts/bootstrap.sh installs python3-torch)")
BINARY = _support.binary()

from geotrain.deployment import config_for_model, serve  # noqa: E402
from geotrain.torch import OuterSync  # noqa: E402

BASE = """
regions: [a, b]
server:
  staleness_bound: 0
  optimizer: {{lr: 1.0, momentum: 0.0}}
  heartbeat_ms: 200
  dead_after_ms: 30000
{server_extra}worker:
  local_steps: 2
  rounds: 3
  critical_codec: {critical_codec}
  noncritical_codec: {noncritical}
  overlap: {overlap}
{worker_extra}run:
  name: outer-sync
  wan_profile: {wan}
  plots: false
  progress_interval_s: 1
"""


def load_safetensors(path):
    """A safetensors file's F32 tensors and metadata, read by hand (the format is a u64 header
    length, a JSON header, then the raw data): an independent reader of what geotrain wrote."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {"__metadata__": header.pop("__metadata__", {})}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    return out


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))


class TwoRegions(unittest.TestCase):
    def start(self, tmp, overlap=False, noncritical="fp32", critical=("*",), critical_codec="fp32",
              server_extra="", worker_extra=""):
        # Critical tensors are combined synchronously: each round's global step is exactly the
        # mean of the regions' deltas. (Non-critical ones apply on arrival: no closed form.)
        critical = list(critical)
        base = os.path.join(tmp, "base.yaml")
        with open(base, "w") as f:
            f.write(BASE.format(overlap=str(overlap).lower(), noncritical=noncritical,
                                critical_codec=critical_codec, server_extra=server_extra,
                                worker_extra=worker_extra,
                                wan=os.path.join(_support.source_dir(), "configs/wan/lan.yaml")))
        config = config_for_model(base, tiny_model().named_parameters(),
                                  os.path.join(tmp, "config.yaml"), critical=critical)
        log = open(os.path.join(tmp, "serve.log"), "w")
        self.addCleanup(log.close)
        servers = serve(config, out=os.path.join(tmp, "runs"), binary=BINARY, stdout=log)
        self.addCleanup(servers.stop)
        return servers

    def run_region(self, servers, region, increment, results, model, step_s=0.0, **options):
        start = [p.detach().clone() for p in model.parameters()]
        sync = OuterSync(model, config=servers.config, region=region, **options)
        history = []
        while sync.training:  # rounds x H steps; time-budgeted rounds: as many as fit
            if step_s:
                time.sleep(step_s)  # this region's "hardware"
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(increment)  # the "local optimizer": a known delta per step
            if sync.step(loss=1.0 / (1 + sync.steps)):
                history.append([(p - s).mean().item() for p, s in
                                zip(model.parameters(), start)])
        with self.assertRaisesRegex(RuntimeError, "rounds are done"):  # a step too many
            sync.step()
        sync.finish(evaluate=lambda: {"test_accuracy": 0.75}, test_accuracy=0.5)
        results[region] = history

    def run_both(self, servers, step_s=None, increments=(1.0, 3.0), **options):
        step_s = step_s or {}
        results, errors = {}, []
        # Built here, one after the other: torch.manual_seed and the initialisers share one global
        # generator, which two threads building models at once would race on.
        models = {"a": tiny_model(), "b": tiny_model()}

        def target(region, inc):
            try:
                self.run_region(servers, region, inc, results, models[region],
                                step_s.get(region, 0.0), **options)
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        threads = [threading.Thread(target=target, args=(r, inc))
                   for r, inc in zip(("a", "b"), increments)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        return results

    def test_each_round_both_regions_hold_the_mean_of_their_deltas(self):
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp)
            results = self.run_both(servers)
            # H = 2 steps of +1 (a) and +3 (b): the global step is the mean, +4 per round.
            for region in ("a", "b"):
                self.assertEqual(results[region], [[4.0] * 4, [8.0] * 4, [12.0] * 4], region)
            self.assertEqual(servers.wait(60), 0)
            with open(os.path.join(servers.run_dir, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual(summary["status"], "completed")
            self.assertEqual(summary["rounds"], 3)
            self.assertAlmostEqual(summary["final_test_accuracy"], 0.75)  # evaluate(): global
            self.assertGreater(summary["wan_wire_bytes_total"], 0)  # netsim carried the WAN
            self.assertTrue(os.path.exists(os.path.join(servers.run_dir, "report.md")))
            self.assertTrue(os.path.exists(os.path.join(servers.run_dir, "params-a.f32")))

    def test_powersgd_factorises_the_python_models_matrices(self):
        # Every step adds the same value to every element: a round's delta of each weight is a
        # constant matrix, rank 1, which powersgd at rank 1 sends whole; fp16 (the fallback, and
        # what a leader without the tensors' shapes would send) is 2e-4 off at 4.0004. The
        # biases go through fp16: not checked.
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp, critical_codec="powersgd:rank=1")
            results = self.run_both(servers, increments=(1.0001, 3.0003))
            self.assertEqual(servers.wait(60), 0)
            for region in ("a", "b"):
                self.assertEqual(len(results[region]), 3, region)
                for r, got in enumerate(results[region]):
                    for weight in (got[0], got[2]):  # fc weights: parameters 0 and 2
                        self.assertAlmostEqual(weight, 4.0004 * (r + 1), places=5, msg=region)

    def test_time_budgeted_rounds_take_the_steps_that_fit_and_merge_by_tokens(self):
        # worker.round_time_ms: 0.5 s a round. Region b's steps take 0.45 s, a's about 0.02 (up to
        # 0.1 on a loaded machine): after the first round (H = 2, no pace known yet) b takes 1 step
        # a round (1.11, the rest carried) and a as many as fit, at most max_local_steps; the
        # servers weigh each delta by its tokens (steps here).
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp, server_extra="  consistency: {weighting: tokens}\n",
                                 worker_extra="  round_time_ms: 500\n  max_local_steps: 6\n")
            results = self.run_both(servers, step_s={"a": 0.02, "b": 0.45})
            self.assertEqual(servers.wait(60), 0)
            counts = {}
            for region in ("a", "b"):
                events = read_events(os.path.join(servers.run_dir,
                                                  f"worker-{region}-0.metrics.jsonl"))
                counts[region] = [e["steps"] for e in events if e["event"] == "round"]
            self.assertEqual(counts["a"][0], 2)
            self.assertEqual(counts["b"][0], 2)
            self.assertEqual(counts["b"][1:], [1, 1])
            self.assertTrue(all(k >= 5 for k in counts["a"][1:]), counts)
            # Each round's global step: the token-weighted mean of a's k_a x (+1) and b's
            # k_b x (+3), the same in both regions.
            total, expected = 0.0, []
            for ka, kb in zip(counts["a"], counts["b"]):
                total += (ka * ka * 1.0 + kb * kb * 3.0) / (ka + kb)
                expected.append(total)
            for region in ("a", "b"):
                self.assertEqual(len(results[region]), 3, region)
                for got, want in zip(results[region], expected):
                    for value in got:
                        self.assertAlmostEqual(value, want, places=4)

    def test_a_python_leader_takes_error_feedback_and_shard_wait_from_the_config(self):
        # worker.error_feedback.decay and worker.shard_wait_ms shape the leader's sync as in the
        # native worker: from the config, and from OuterSync's arguments over it.
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp)
            with open(servers.config) as f:
                text = f.read()
            config = os.path.join(tmp, "leader.yaml")
            with open(config, "w") as f:
                f.write(text.replace("worker:\n", "worker:\n  error_feedback: {decay: 0.7}\n"
                                     "  shard_wait_ms: 300\n", 1))
            for options, decay, wait in (({}, 0.7, 300),
                                         ({"error_feedback": {"decay": 0.5},
                                           "shard_wait_ms": 0}, 0.5, 0),
                                         ({"shard_wait_ms": "auto"}, 0.7, "auto")):
                sync = OuterSync(tiny_model(), config=config, region="a", metrics=False,
                                 **options)
                self.assertAlmostEqual(sync._leader.error_feedback_decay, decay, places=6)
                self.assertEqual(sync._leader.shard_wait_ms, wait)
                sync.close()
            # Checked by the config parser, naming the key and the override.
            with self.assertRaisesRegex(ValueError, r"with --set worker.error_feedback=.*"
                                        "worker.error_feedback.decay is 1.5"):
                OuterSync(tiny_model(), config=config, region="a", metrics=False,
                          error_feedback={"decay": 1.5})

    def test_the_run_ends_with_one_global_model_written_by_the_first_region(self):
        with tempfile.TemporaryDirectory() as tmp:
            # 1 bit both ways: the regions' parameters differ until the flush pulls the global
            # model (fp32) into both.
            servers = self.start(tmp, critical_codec="onebit")
            # Each leader stripes over 3 connections per server (worker.streams_per_server).
            self.run_both(servers, streams_per_server=3)
            self.assertEqual(servers.wait(60), 0)
            run = servers.run_dir
            a = np.fromfile(os.path.join(run, "params-a.f32"), dtype=np.float32)
            b = np.fromfile(os.path.join(run, "params-b.f32"), dtype=np.float32)
            self.assertTrue(np.array_equal(a, b))  # one model, bit for bit
            model = load_safetensors(os.path.join(run, "model.safetensors"))
            self.assertEqual(model["__metadata__"]["weights"], "global model")
            self.assertEqual(list(model["0.weight"].shape), [3, 4])
            flat = np.concatenate([model[n].reshape(-1) for n in
                                   ("0.weight", "0.bias", "1.weight", "1.bias")])
            self.assertTrue(np.array_equal(flat, a))
            settings = geotrain._core.leader_settings(open(servers.config).read(), "c", "a")
            self.assertIsInstance(settings["streams_per_server"], int)  # the config's, for Python
            hashes = {}
            for region in ("a", "b"):
                events = read_events(os.path.join(run, f"worker-{region}-0.metrics.jsonl"))
                flush = [e for e in events if e["event"] == "flush"]
                self.assertEqual(len(flush), 1)
                # Each shard's hash of the values pulled (16 hex digits), as the native leaders
                # write it: both regions pulled the same global model.
                hashes[region] = flush[0]["shard_hashes"]
                self.assertTrue(hashes[region])
                self.assertTrue(all(len(h) == 16 for h in hashes[region].values()))
                # The tensor motion, as the native leaders write it: every tensor moved.
                motion = [e for e in events if e["event"] == "tensor_motion"]
                self.assertEqual(len(motion), 1)
                self.assertEqual([t["name"] for t in motion[0]["tensors"]],
                                 ["0.weight", "0.bias", "1.weight", "1.bias"])
                self.assertTrue(all(t["relative_update"] > 0 for t in motion[0]["tensors"]))
                self.assertTrue(flush[0]["global_model"])
                done = [e for e in events if e["event"] == "done"][0]
                self.assertTrue(done["global_model"])
                self.assertAlmostEqual(done["region_test_accuracy"], 0.5)
                self.assertAlmostEqual(done["final_test_accuracy"], 0.75)
            self.assertEqual(hashes["a"], hashes["b"])

    def test_overlap_merges_one_round_late(self):
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp, overlap=True, critical=["0.*", "1.*"])
            results = self.run_both(servers)
            # Round 1's exchange runs behind round 2's steps and is merged at round 2's end:
            # local = base_new + (local - snapshot). Region a: +2 (round 2) on top of +4 global.
            for region, expected in (("a", [2.0, 6.0]), ("b", [6.0, 10.0])):
                self.assertEqual(len(results[region]), 3, region)  # three round boundaries
                for got, want in zip(results[region][:2], expected):
                    for value in got:
                        self.assertAlmostEqual(value, want, places=4, msg=region)
            self.assertEqual(servers.wait(60), 0)

    def test_a_model_that_is_not_the_servers_table_is_refused_before_connecting(self):
        with tempfile.TemporaryDirectory() as tmp:
            servers = self.start(tmp)
            with self.assertRaisesRegex(ValueError, "parameter 0 is weight"):
                OuterSync(torch.nn.Linear(4, 3), config=servers.config, region="a")
            with self.assertRaisesRegex(ValueError, "allowed: a, b"):
                OuterSync(tiny_model(), config=servers.config, region="c")


class Schedule(unittest.TestCase):
    def test_the_fragment_schedule_is_the_native_one(self):
        # H = 8, P = 4, a merge 2 steps after each push (pushes at 2, 4, 6, 8).
        s = geotrain._core.FragmentSchedule(8, 4, 2)
        self.assertEqual([k for k in range(1, 9) if s.due(k, 0)], [2])
        self.assertEqual([k for k in range(1, 11) if s.changes_after(k)], [2, 4, 6, 8, 10])
        self.assertEqual(geotrain._core.changes_after(6, 4, 8, 2), s.changes_after(6))
        self.assertEqual(geotrain._core.merge_delay(8, 4, "eager"), 2)
        with self.assertRaisesRegex(ValueError, "fragments <= local_steps"):
            geotrain._core.FragmentSchedule(2, 4, 0)

    def test_the_round_budget_and_merge_calendar_bindings(self):
        # RoundBudget: H until a pace is known, then the steps that fit, the rounding carried
        # (0.75 s at 0.5 s a step: 1.5 -> 2, then 1.5 - 0.5 -> 1, then 2 again: 1.5 a round).
        budget = geotrain._core.RoundBudget(0.75, 6, 4)
        self.assertEqual(budget.plan(), 4)
        for _ in range(4):
            budget.record_step(0.5)
        self.assertEqual(budget.plan(), 2)
        self.assertEqual(budget.pace_s, 0.5)
        self.assertEqual([budget.plan() for _ in range(4)], [1, 2, 1, 2])
        with self.assertRaisesRegex(ValueError, "budget_s 0"):
            geotrain._core.RoundBudget(0.0, 6, 4)
        # MergeCalendar: one fragment, no delay: the parameters change after each round's last
        # step, whatever its count.
        calendar = geotrain._core.MergeCalendar(geotrain._core.FragmentSchedule(4, 1, 0))
        self.assertEqual([calendar.changes_after(s, h, 3) for s, h in ((1, 1), (2, 2), (3, 3))],
                         [False, False, True])
        self.assertTrue(calendar.changes_after(4, 1, 1))
        with self.assertRaisesRegex(ValueError, "place in its round is 3 of 2"):
            calendar.changes_after(5, 3, 2)

    def test_the_done_events_end_figures_follow_the_native_rule(self):
        # final_* only with a global model; region_* always; the error without one.
        end = geotrain._core.end_figures({"test_accuracy": 0.5}, {"test_accuracy": 0.75})
        self.assertEqual(end, {"global_model": True, "region_test_accuracy": 0.5,
                               "final_test_accuracy": 0.75})
        end = geotrain._core.end_figures({"val_bpb": 1.9, "val_loss": 1.3}, None, "no flush")
        self.assertEqual(end, {"global_model": False, "region_val_bpb": 1.9,
                               "region_val_loss": 1.3, "global_model_error": "no flush"})
        with self.assertRaisesRegex(ValueError, "figure 'val_bpb' is not a number"):
            geotrain._core.end_figures({"val_bpb": "low"}, None)


if __name__ == "__main__":
    unittest.main()
