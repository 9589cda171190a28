"""The workers' Prometheus endpoint (worker.metrics_port, docs/monitoring.md), read by an
independent client: urllib for HTTP and prometheus_client's own parser for the text format.
`geotrain run` trains one region of two workers with `metrics_port: auto`; each worker says where
it serves in a `metrics_endpoint` event and the launcher prints the list. Two scrapes while the
run trains: the counters have the Prometheus types, only grow, agree with the samples trained per
step, and the leader alone has the WAN, round and evaluation series."""

import glob
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import _support

BINARY = _support.binary()
try:
    import prometheus_client.parser  # noqa: F401  (_support.prometheus_scrape uses it)
except ImportError:
    _support.skip("prometheus_client is not installed (python3-prometheus-client)")

CONFIG = """
regions: [a]
model: {arch: "784-32-10"}
server:
  metrics_port: auto
worker:
  workers_per_region: 2
  batch_size: 16
  local_steps: 4
  rounds: 100000
  eval_every: 2
  step_delay_ms: {a: 20}
  metrics_port: auto
run:
  name: worker-metrics
  plots: false
  progress_interval_s: 1
"""


def scrape(url):
    """({(name, labels as a sorted tuple): value}, {family: type}) of one scrape."""
    samples, types, _ = _support.prometheus_scrape(url)
    return samples, types


def value(samples, name, **labels):
    matches = [v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items())]
    return matches[0] if len(matches) == 1 else None


class WorkerMetrics(unittest.TestCase):
    def test_each_worker_serves_its_training_and_the_launcher_lists_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = os.path.join(tmp, "config.yaml")
            with open(config, "w") as f:
                f.write(CONFIG)
            log = open(os.path.join(tmp, "launcher.log"), "w")
            run = subprocess.Popen([BINARY, "run", config, "--out", tmp, "--no-plots"],
                                   stdout=log, stderr=subprocess.STDOUT)
            try:
                urls = self.wait_for_endpoints(tmp, 2)
                self.wait_for_eval(tmp)
                first = {rank: scrape(url) for rank, url in urls.items()}
                time.sleep(1.5)
                second = {rank: scrape(url) for rank, url in urls.items()}
                server, _ = scrape(self.server_url(tmp))
            finally:
                run.send_signal(signal.SIGINT)
                run.wait(timeout=60)
                log.close()
            with open(os.path.join(tmp, "launcher.log")) as f:
                launcher = f.read()
            self.assertIn("Prometheus metrics of the workers: a-0=http://127.0.0.1:", launcher)

        for rank in (0, 1):
            samples, types = second[rank]
            before, _ = first[rank]
            who = {"region": "a", "rank": str(rank)}
            self.assertEqual(types["geotrain_worker_steps"], "counter")
            self.assertEqual(types["geotrain_worker_samples"], "counter")
            self.assertEqual(types["geotrain_worker_loss"], "gauge")
            self.assertEqual(types["geotrain_worker_compute_utilization"], "gauge")
            self.assertEqual(types["process_resident_memory_bytes"], "gauge")
            steps = value(samples, "geotrain_worker_steps_total", **who)
            self.assertGreater(steps, value(before, "geotrain_worker_steps_total", **who))
            # batch_size samples per step, per worker.
            self.assertEqual(value(samples, "geotrain_worker_samples_total", **who), 16 * steps)
            self.assertGreater(value(samples, "geotrain_worker_compute_seconds_total", **who), 0)
            self.assertGreater(value(samples, "geotrain_worker_optimizer_seconds_total", **who), 0)
            self.assertTrue(0 < value(samples, "geotrain_worker_compute_utilization", **who) <= 1)
            self.assertEqual(value(samples, "geotrain_worker_info", model="mlp", device="cpu",
                                   **who), 1)
        leader, _ = second[0]
        other, _ = second[1]
        self.assertGreaterEqual(value(leader, "geotrain_worker_rounds_total", region="a"), 2)
        self.assertGreater(value(leader, "geotrain_worker_wan_pushed_bytes_total", region="a"), 0)
        self.assertTrue(0 < value(leader, "geotrain_worker_test_accuracy", region="a") <= 1)
        self.assertIsNone(value(other, "geotrain_worker_rounds_total", rank="1"))
        self.assertIsNone(value(other, "geotrain_worker_test_accuracy", rank="1"))

        # Every series the shipped Grafana dashboard queries is one a worker or a server
        # exports (a GPT worker's tokens_total stands in for the MLP's samples_total).
        exported = {name for samples, _ in second.values() for name, _ in samples}
        exported |= {name for name, _ in server}
        exported |= {"geotrain_worker_tokens_total", "geotrain_worker_val_bpb",
                     "geotrain_worker_val_loss"}
        with open(os.path.join(_support.source_dir(), "docs/grafana/geotrain-dashboard.json")) as f:
            dashboard = json.load(f)
        queried = set()

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("expr"), str):
                    queried.update(re.findall(r"\b(?:geotrain|process)_[a-z_]+", node["expr"]))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(dashboard)
        self.assertGreater(len(queried), 10)
        self.assertEqual(queried - exported, set())

    def server_url(self, tmp):
        """The server's endpoint, from the run folder's resolved config (metrics_port: auto)."""
        path = glob.glob(os.path.join(tmp, "*worker-metrics*", "config.yaml"))[0]
        with open(path) as f:
            text = f.read()
        port = re.search(r"metrics_port:\s*\n\s+a:\s*(\d+)", text) or \
            re.search(r"metrics_port:\s*\{\s*a:\s*(\d+)", text)
        self.assertIsNotNone(port, text)
        return f"http://127.0.0.1:{port.group(1)}/metrics"

    def wait_for_endpoints(self, tmp, n, timeout=60):
        """{rank: url} from the workers' metrics_endpoint events."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            urls = {}
            for path in glob.glob(os.path.join(tmp, "*worker-metrics*", "worker-a-*.metrics.jsonl")):
                with open(path) as f:
                    for line in f:
                        e = json.loads(line) if line.strip().endswith("}") else {}
                        if e.get("event") == "metrics_endpoint":
                            urls[e["rank"]] = e["url"]
            if len(urls) == n:
                return urls
            time.sleep(0.2)
        self.fail(f"{n} metrics_endpoint events within {timeout} s")

    def wait_for_eval(self, tmp, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for path in glob.glob(os.path.join(tmp, "*worker-metrics*", "worker-a-0.metrics.jsonl")):
                with open(path) as f:
                    if '"event":"eval"' in f.read():
                        return
            time.sleep(0.2)
        self.fail(f"no evaluation within {timeout} s")


if __name__ == "__main__":
    unittest.main()
