"""The servers' Prometheus endpoint (server.metrics_port, docs/monitoring.md), read by an
independent client: urllib for HTTP and prometheus_client's own parser for the text format.
`geotrain serve` with metrics_port: auto gives each server a port and lists it in endpoints.json;
two Python leaders push and pull through netsim, and the counters a scrape shows move by exactly
what they did."""

import json
import os
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

import numpy as np

import _support

geotrain = _support.import_geotrain()
BINARY = _support.binary()
try:
    import prometheus_client.parser  # noqa: F401  (_support.prometheus_scrape uses it)
except ImportError:
    _support.skip("prometheus_client is not installed (python3-prometheus-client)")

from geotrain.deployment import config_for_model, serve  # noqa: E402

BASE = """
regions: [a, b]
server:
  staleness_bound: 0
  chunk: 64
  heartbeat_ms: 200
  dead_after_ms: 30000
  metrics_port: auto
worker:
  local_steps: 1
  rounds: 2
run:
  name: metrics
  wan_profile: {wan}
  plots: false
"""
TENSORS = [("w", 512), ("b", 64)]


def scrape(url):
    return _support.prometheus_scrape(url)


def value(samples, name, **labels):
    matches = [v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items())]
    if len(matches) != 1:
        raise AssertionError(f"{name}{labels}: {len(matches)} samples match")
    return matches[0]


class MetricsEndpoint(unittest.TestCase):
    def start(self, tmp):
        base = os.path.join(tmp, "base.yaml")
        with open(base, "w") as f:
            f.write(BASE.format(wan=os.path.join(_support.source_dir(), "configs/wan/lan.yaml")))
        config = config_for_model(base, TENSORS, os.path.join(tmp, "config.yaml"), critical=["*"])
        log = open(os.path.join(tmp, "serve.log"), "w")
        self.addCleanup(log.close)
        servers = serve(config, out=os.path.join(tmp, "runs"), binary=BINARY, stdout=log)
        self.addCleanup(servers.stop)
        with open(os.path.join(servers.run_dir, "endpoints.json")) as f:
            return servers, json.load(f)

    def lead(self, endpoints, region, errors):
        """A region's leader: 2 rounds of H = 1 (one push and one pull per server each)."""
        try:
            routes = endpoints["routes"].get(region, {})
            servers = [(r, routes.get(r, endpoints["servers"][r])) for r in endpoints["regions"]]
            sync = geotrain.RegionSync(TENSORS, ["*"], region, servers, timeout_ms=30000)
            sync.connect()
            params = np.zeros(sync.size, dtype=np.float32)
            for step in (1, 2):
                params += 1.0
                sync.after_step(step, params)
            sync.finish(2, params)
        except Exception as e:  # reported by the test, not lost in the thread
            errors.append(e)

    def test_a_scrape_shows_what_the_regions_pushed_and_pulled(self):
        with tempfile.TemporaryDirectory() as tmp:
            servers, endpoints = self.start(tmp)
            self.assertEqual(sorted(endpoints["metrics"]), ["a", "b"])
            url = endpoints["metrics"]["a"]
            before, types, content_type = scrape(url)
            self.assertTrue(content_type.startswith("text/plain; version=0.0.4"), content_type)
            self.assertEqual(types["geotrain_pushes"], "counter")  # the parser drops _total
            self.assertEqual(types["geotrain_push_staleness"], "histogram")
            self.assertEqual(value(before, "geotrain_pushes_total", server="a", region="a"), 0)
            self.assertEqual(value(before, "geotrain_server_info", server="a"), 1)
            self.assertGreater(value(before, "process_resident_memory_bytes"), 1 << 20)

            errors = []
            threads = [threading.Thread(target=self.lead, args=(endpoints, r, errors))
                       for r in ("a", "b")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertEqual(errors, [])

            for server in ("a", "b"):
                after, _, _ = scrape(endpoints["metrics"][server])
                for region in ("a", "b"):
                    labels = dict(server=server, region=region)
                    # Two rounds: two pushes and two pulls of this server's shards per region.
                    self.assertEqual(value(after, "geotrain_pushes_total", **labels), 2, labels)
                    self.assertGreaterEqual(value(after, "geotrain_pulls_total", **labels), 2)
                    self.assertGreater(value(after, "geotrain_received_bytes_total", **labels), 0)
                    self.assertGreater(value(after, "geotrain_sent_bytes_total", **labels), 0)
                    self.assertEqual(value(after, "geotrain_error_replies_total", **labels), 0)
                    self.assertEqual(value(after, "geotrain_region_live", **labels), 1)
                    self.assertEqual(value(after, "geotrain_push_staleness_count", **labels), 2)
                    self.assertEqual(value(after, "geotrain_push_staleness_bucket", le="+Inf",
                                           **labels), 2)
                self.assertEqual(value(after, "geotrain_regions_live", server=server), 2)
                self.assertGreaterEqual(value(after, "geotrain_rounds_released_total",
                                              server=server), 2)
            after_a, _, _ = scrape(url)
            self.assertGreater(value(after_a, "geotrain_received_bytes_total", server="a",
                                     region="b"),
                               value(before, "geotrain_received_bytes_total", server="a",
                                     region="b"))
            self.assertGreaterEqual(value(after_a, "process_cpu_seconds_total"),
                                    value(before, "process_cpu_seconds_total"))

    def test_other_paths_and_methods_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            servers, endpoints = self.start(tmp)
            url = endpoints["metrics"]["b"]
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
            self.assertEqual(e.exception.code, 404)
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"),
                                       timeout=10)
            self.assertEqual(e.exception.code, 405)
            head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10)
            self.assertEqual(head.status, 200)
            self.assertEqual(head.read(), b"")
            samples, _, _ = scrape(url)  # still serving after the refusals
            self.assertEqual(value(samples, "geotrain_server_info", server="b"), 1)


if __name__ == "__main__":
    unittest.main()
