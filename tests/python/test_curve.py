"""geotrain.torch.OuterSync with CURVE on every server link (security.curve, docs/deploy.md):
two regions train through `geotrain serve` and netsim with the keys the run folder's config names,
and a leader with no keys, a stranger's client key or the wrong server keys is refused at once
with geotrain.HandshakeError naming the reason, not left waiting for a timeout."""

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import _support

geotrain = _support.import_geotrain()
torch = _support.import_torch()
if torch is None:
    _support.skip("torch is not installed (scripts/bootstrap.sh installs python3-torch)")
BINARY = _support.binary()

from geotrain.deployment import config_for_model, serve  # noqa: E402
from geotrain.torch import OuterSync  # noqa: E402

# The keys `geotrain keygen` wrote; the run folder's resolved config.yaml names them, and
# OuterSync reads them from there.
BASE = """
regions: [a, b]
security: {{curve: true, keys_dir: "{keys}"}}
server:
  staleness_bound: 0
  optimizer: {{lr: 1.0, momentum: 0.0}}
  heartbeat_ms: 200
  dead_after_ms: 30000
worker:
  local_steps: 2
  rounds: 2
  critical_codec: fp32
  noncritical_codec: fp32
run:
  name: curve
  wan_profile: {wan}
  plots: false
  progress_interval_s: 1
"""

# Refusals come back within a few reconnect intervals; this bound is far below the timeout the
# refused leaders are given, so passing it means they did not wait for the timeout.
TIMEOUT_MS = 60000
REFUSED_WITHIN_S = 20


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))


class Curve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="geotrain-curve-")
        cls.keys = cls.keygen("keys")
        base = os.path.join(cls.tmp, "base.yaml")
        with open(base, "w") as f:
            f.write(BASE.format(keys=cls.keys,
                                wan=os.path.join(_support.source_dir(), "configs/wan/lan.yaml")))
        config = config_for_model(base, tiny_model().named_parameters(),
                                  os.path.join(cls.tmp, "config.yaml"), critical=["*"])
        cls.log = open(os.path.join(cls.tmp, "serve.log"), "w")
        cls.servers = serve(config, out=os.path.join(cls.tmp, "runs"), binary=BINARY,
                            stdout=cls.log)

    @classmethod
    def tearDownClass(cls):
        cls.servers.stop()
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def keygen(cls, name):
        out = os.path.join(cls.tmp, name)
        subprocess.run([BINARY, "keygen", "--out", out, "--regions", "a,b"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return out

    def refused(self, pattern, **kwargs):
        t0 = time.monotonic()
        with self.assertRaisesRegex(geotrain.HandshakeError, pattern) as caught:
            OuterSync(tiny_model(), config=self.servers.config, region="a",
                      timeout_ms=TIMEOUT_MS, metrics=False, **kwargs)
        took = time.monotonic() - t0
        self.assertLess(took, REFUSED_WITHIN_S, str(caught.exception))
        self.assertIsInstance(caught.exception, ConnectionError)
        # The message names the server it could not reach.
        self.assertIn("the server of region", str(caught.exception))
        return str(caught.exception)

    def test_1_a_leader_without_keys_is_refused_at_once(self):
        # curve=False overrides the config's security section: a plain (NULL) client.
        message = self.refused("requires CURVE|may require CURVE", curve=False)
        self.assertIn("no CURVE", message)

    def test_2_a_client_key_not_in_the_allow_list_is_refused_by_the_authenticator(self):
        # Right server keys, a stranger's client keypair: the servers' ZAP handler says no.
        stranger = self.keygen("stranger")
        for region in ("a", "b"):
            shutil.copy(os.path.join(self.keys, f"server-{region}.public"), stranger)
        self.refused("authenticator refused this client's key", keys_dir=stranger)

    def test_3_keys_of_another_deployment_are_refused(self):
        # Every key wrong: the servers cannot decrypt our hello and hang up.
        self.refused("closed the connection during the handshake|decrypt",
                     keys_dir=self.keygen("other"))

    def test_4_a_missing_key_file_is_a_value_error_naming_it(self):
        with self.assertRaisesRegex(ValueError, "CURVE key file .*nowhere.*geotrain keygen"):
            OuterSync(tiny_model(), config=self.servers.config, region="a",
                      keys_dir=os.path.join(self.tmp, "nowhere"), metrics=False)
        # The config parser's check, as for a native worker, naming the argument.
        with self.assertRaisesRegex(ValueError, "--set security.curve=true.*"
                                    "security.keys_dir is missing"):
            OuterSync(tiny_model(), servers={"a": "tcp://127.0.0.1:1"}, region="a", curve=True)

    def test_5_both_regions_train_with_the_config_keys(self):
        with open(self.servers.config) as f:
            text = f.read()
        self.assertIn("curve: true", text)
        self.assertIn(self.keys, text)
        results, errors = {}, []
        # Built here, one after the other: torch.manual_seed and the initialisers share one global
        # generator, so two threads building models at once could draw each other's numbers, and
        # the exact sums below hold for seed 0's values.
        models = {"a": tiny_model(), "b": tiny_model()}

        def region(name, increment):
            try:
                model = models[name]
                start = [p.detach().clone() for p in model.parameters()]
                sync = OuterSync(model, config=self.servers.config, region=name)
                self.assertTrue(sync.curve)
                history = []
                for _ in range(sync.total_steps):
                    with torch.no_grad():
                        for p in model.parameters():
                            p.add_(increment)
                    if sync.step(loss=1.0):
                        history.append([(p - s).mean().item()
                                        for p, s in zip(model.parameters(), start)])
                sync.finish()
                results[name] = history
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        threads = [threading.Thread(target=region, args=a) for a in (("a", 1.0), ("b", 3.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        # H = 2 steps of +1 (a) and +3 (b): the global step is their mean, +4 per round, over
        # encrypted links (the values are exact: fp32 both ways).
        for name in ("a", "b"):
            self.assertEqual(results[name], [[4.0] * 4, [8.0] * 4], name)
        self.assertEqual(self.servers.wait(60), 0)
        with open(os.path.join(self.servers.run_dir, "server-a.log")) as f:
            self.assertIn("CURVE", f.read())


if __name__ == "__main__":
    unittest.main()
