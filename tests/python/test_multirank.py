"""OuterSync inside a region's own torch.distributed group: two regions x two ranks, each region
its own gloo group (init_method file://, as two separate torchrun jobs would be), gradients
AllReduced by DistributedDataParallel every step, and OuterSync built on every rank: rank 0 talks
to the servers (`geotrain serve` with netsim) and broadcasts the new parameters to rank 1.

Checks: every rank of a region holds identical parameters after every round and at the end,
every region ends on the same global values, and the loss falls. A leader that cannot connect
makes the other ranks of its group fail too, instead of waiting in a broadcast.

Each rank is forked from a multiprocessing fork server (torch imported once) and runs rank_main.
"""

import faulthandler
import gc
import json
import multiprocessing
import os
import re
import socket
import tempfile
import time
import unittest

import _support

BASE = """
regions: [a, b]
server:
  staleness_bound: 0
  optimizer: {{lr: 1.0, momentum: 0.0}}
  heartbeat_ms: 200
  dead_after_ms: 30000
worker:
  local_steps: 4
  rounds: 5
  critical_codec: fp32
  noncritical_codec: int8
{worker_extra}run:
  name: multirank
  wan_profile: {wan}
  plots: false
  progress_interval_s: 1
"""


# 1281 parameters: more than one codec chunk (1024), so that two fragments are both non-empty.
HIDDEN = 128


def make_model(torch):
    torch.manual_seed(0)  # every rank of every region starts from the same parameters
    return torch.nn.Sequential(torch.nn.Linear(8, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, 1))


def data(torch, seed):
    """A regression task shared by all (the same w*), with each rank's own samples."""
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(8, 1, generator=g)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=g)
    return x, torch.tanh(x @ w) + 0.01 * torch.randn(64, 1, generator=g)


def rank_main(argv):
    """One rank of one region's group: DDP for the gradients, OuterSync for the WAN."""
    config, region, rank, world, init, out = argv[:6]
    rank, world = int(rank), int(world)
    # Where a rank that hangs is stuck, in its log, before the parent gives up on it.
    stacks = open(out + ".stacks", "w")
    faulthandler.dump_traceback_later(60, exit=False, file=stacks)
    import torch  # already imported by the parent (fork)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from geotrain.torch import OuterSync

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    result = {"region": region, "rank": rank}
    model = opt = sync = None
    try:
        model = DDP(make_model(torch))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if len(argv) > 6:  # a leader that cannot connect (the failure test)
            sync = OuterSync(model.module, servers=json.loads(argv[6]), region=region,
                             timeout_ms=1500, metrics=False)
        else:
            sync = OuterSync(model.module, config=config, region=region)
        x, y = data(torch, seed=10 * ord(region) + rank)
        ex, ey = data(torch, seed=999)  # one evaluation set for every rank

        def eval_loss():
            with torch.no_grad():
                return torch.nn.functional.mse_loss(model.module(ex), ey).item()

        result["initial_loss"] = eval_loss()
        result["rounds"], result["steps"] = [], []
        while sync.training:  # rounds x H steps; time-budgeted: the leader's counts
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()  # DDP AllReduces the gradients inside the region
            opt.step()
            boundary = sync.step(loss=loss.item())
            result["steps"].append(sync.parameters.tolist())
            if boundary:
                result["rounds"].append(result["steps"][-1])
        sync.finish(val_loss=eval_loss())
        result["final"] = sync.parameters.tolist()
        result["final_loss"] = eval_loss()
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    # DDP's reducer and the OuterSync go before the group they use: torch documents this order,
    # and a DDP freed after destroy_process_group (when this function's frame is torn down) once
    # hung a rank whose result was already written.
    model = opt = sync = None
    gc.collect()
    with open(out, "w") as f:
        json.dump(result, f)
    # Both ranks are still in the group after an OuterSync error: leave it together.
    dist.barrier()
    dist.destroy_process_group()


class MultiRank(unittest.TestCase):
    def launch(self, tmp, config, regions, extra=(), ranks=None):
        """Runs 2 ranks per region (or ranks[region]), each forked from a fork server that imported torch once
        (four fresh interpreters would spend most of the test importing it; forking this
        process itself, which has run other tests, once hung a child). Returns
        {(region, rank): result}."""
        fork = multiprocessing.get_context("forkserver")
        procs = {}
        for region in regions:
            init = "file://" + os.path.join(tmp, f"pg-{region}")
            size = (ranks or {}).get(region, 2)
            for rank in range(size):
                out = os.path.join(tmp, f"result-{region}-{rank}.json")
                procs[(region, rank)] = (out, fork.Process(
                    target=rank_main, args=([config, region, str(rank), str(size), init, out,
                                             *extra],)))
        for _, p in procs.values():
            p.start()
        results = {}
        for key, (out, p) in procs.items():
            p.join(90)
            if p.is_alive():
                for _, q in procs.values():
                    q.kill()
                with open(out + ".stacks") as f:
                    stacks = f.read()
                self.fail(f"rank {key} did not finish within 90 s (a hang; its result "
                          f"{'was' if os.path.exists(out) else 'was not'} written); its Python "
                          f"stack after 60 s:\n{stacks}")
            self.assertTrue(os.path.exists(out), f"rank {key} exited {p.exitcode} without a "
                            "result")
            with open(out) as f:
                results[key] = json.load(f)
        return results

    def run_regions(self, tmp, worker_extra="", ranks_fragments=None, ranks=None, steps=20):
        """`geotrain serve` for regions a and b (netsim between them), then 2 ranks per region
        (or ranks[region]). Checks what holds in every mode and returns the results. With
        ranks_fragments, the ranks read a copy of the config whose worker.fragments says that
        instead. steps: each rank's steps (None: time-budgeted rounds, as many as the leader
        planned, the same on every rank of a region)."""
        torch = _support.import_torch()
        from geotrain.deployment import config_for_model, serve
        base = os.path.join(tmp, "base.yaml")
        with open(base, "w") as f:
            f.write(BASE.format(worker_extra=worker_extra,
                                wan=os.path.join(_support.source_dir(), "configs/wan/lan.yaml")))
        # The first layer's weight is critical (fp32, synchronous), the rest int8: both paths
        # of the servers, and parameters that are not a closed form.
        config = config_for_model(base, make_model(torch).named_parameters(),
                                  os.path.join(tmp, "config.yaml"), critical=["0.weight"])
        log = open(os.path.join(tmp, "serve.log"), "w")
        self.addCleanup(log.close)
        t0 = time.monotonic()
        servers = serve(config, out=os.path.join(tmp, "runs"), binary=BINARY, stdout=log)
        self.addCleanup(servers.stop)
        t1 = time.monotonic()
        ranks_config = servers.config
        if ranks_fragments is not None:
            with open(servers.config) as f:
                text = f.read()
            ranks_config = os.path.join(tmp, "ranks.yaml")
            with open(ranks_config, "w") as f:
                f.write(re.sub(r"(?m)^(\s+fragments:) \d+", rf"\1 {ranks_fragments}", text))
        results = self.launch(tmp, ranks_config, ("a", "b"), ranks=ranks)
        t2 = time.monotonic()
        for key, r in results.items():
            self.assertNotIn("error", r, key)
        for region in ("a", "b"):
            r0 = results[(region, 0)]
            self.assertEqual(len(r0["rounds"]), 5)
            if steps is not None:
                self.assertEqual(len(r0["steps"]), steps)
            self.assertLess(r0["final_loss"], 0.5 * r0["initial_loss"], region)
            for rank in range(1, (ranks or {}).get(region, 2)):
                r1 = results[(region, rank)]
                self.assertEqual(len(r1["steps"]), len(r0["steps"]), (region, rank))
                # Bit-identical inside the region after every step (so after every broadcast
                # the leader's exchanges called for, and no step where one was missed) and at
                # the end.
                for step, (p0, p1) in enumerate(zip(r0["steps"], r1["steps"])):
                    self.assertEqual(p0, p1, f"region {region}, after step {step + 1}")
                self.assertEqual(r0["final"], r1["final"], region)
        print(f"serve up {t1 - t0:.1f} s, ranks {t2 - t1:.1f} s")
        # Only the leaders wrote metrics: one file per region, in the native format. (The
        # servers are stopped without waiting for `geotrain serve`'s summary, which
        # test_outer_sync covers: it takes longer than the training here.)
        for region in ("a", "b"):
            self.assertTrue(os.path.exists(
                os.path.join(servers.run_dir, f"worker-{region}-0.metrics.jsonl")))
            self.assertFalse(os.path.exists(
                os.path.join(servers.run_dir, f"worker-{region}-1.metrics.jsonl")))
        return results

    def test_two_regions_of_two_ranks_stay_identical_inside_a_region_and_learn(self):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            results = self.run_regions(tmp)
            # Every region ends on the global values, as each pulled them: exact for the fp32
            # critical tensor (0.weight, first in the table), within the int8 downlink's error
            # for the rest.
            a, b = results[("a", 0)]["final"], results[("b", 0)]["final"]
            self.assertEqual(a[:8 * HIDDEN], b[:8 * HIDDEN])
            self.assertLess(max(abs(x - y) for x, y in zip(a, b)), 0.05)
            # Without overlap, the parameters change between boundaries only by local steps.
            self.assertNotEqual(results[("a", 0)]["rounds"][0], a)
        print(f"2 regions x 2 ranks: {time.monotonic() - t0:.1f} s")

    def test_time_budgeted_rounds_every_rank_takes_its_leaders_count(self):
        # worker.round_time_ms: the leader plans each round's steps from its pace (after a first
        # round of H = 4) and broadcasts the count; every rank of the region steps as many times
        # (bit-identical after every step), and both regions end on the same global values.
        with tempfile.TemporaryDirectory() as tmp:
            results = self.run_regions(tmp, "  round_time_ms: 400\n  max_local_steps: 8\n",
                                       steps=None)
            for region in ("a", "b"):
                r0 = results[(region, 0)]
                self.assertGreater(len(r0["steps"]), 20, region)  # more than H a round fit
            a, b = results[("a", 0)]["final"], results[("b", 0)]["final"]
            self.assertEqual(a[:8 * HIDDEN], b[:8 * HIDDEN])

    def test_an_uneven_fleet_of_three_ranks_and_one_learns_as_one_model(self):
        # worker.workers_per_region {a: 3, b: 1}: region a's group has three ranks, region b's
        # one; both regions end on the same global values (exact for the fp32 critical tensor).
        with tempfile.TemporaryDirectory() as tmp:
            results = self.run_regions(tmp, "  workers_per_region: {a: 3, b: 1}\n",
                                       ranks={"a": 3, "b": 1})
            a, b = results[("a", 0)]["final"], results[("b", 0)]["final"]
            self.assertEqual(a[:8 * HIDDEN], b[:8 * HIDDEN])
            self.assertLess(max(abs(x - y) for x, y in zip(a, b)), 0.05)

    def test_with_overlap_and_two_fragments_the_ranks_follow_the_leaders_merges(self):
        # Fragments exchanged every H / P = 2 steps, merged 2 steps after their push, in the
        # background: the leader's parameters change between round boundaries, and the other
        # rank must take the broadcast after exactly those steps.
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            self.run_regions(tmp, "  overlap: true\n  fragments: 2\n")
        print(f"2 regions x 2 ranks, overlap and 2 fragments: {time.monotonic() - t0:.1f} s")

    def test_ranks_whose_config_says_another_fragment_count_follow_the_servers(self):
        # The servers cut 2 fragments; the ranks' config says 1. The leader takes the servers'
        # count from their hello and its group follows it: bit-identical ranks after every step
        # (run_regions), which a rank on the config's schedule would break.
        with tempfile.TemporaryDirectory() as tmp:
            self.run_regions(tmp, "  overlap: true\n  fragments: 2\n", ranks_fragments=1)
            runs = os.path.join(tmp, "runs")
            (run_dir,) = [os.path.join(runs, d) for d in os.listdir(runs)]
            with open(os.path.join(run_dir, "worker-a-0.metrics.jsonl")) as f:
                start = [json.loads(line) for line in f if '"start"' in line][0]
            self.assertEqual(start["fragments"], 2)
            self.assertEqual(start["fragment_delay"], 2)  # H / P, following the servers' P

    def test_critical_tensors_kept_out_of_streaming_stay_synchronous(self):
        # worker.stream_critical: false: the critical 0.weight is a fragment of its own,
        # exchanged at every round boundary without delay, while the rest streams in 2
        # fragments merged 2 steps late. After every round boundary both regions hold the same
        # 0.weight (fp32, the servers' average), which streamed fragments do not give.
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            results = self.run_regions(
                tmp, "  overlap: eager\n  fragments: 2\n  stream_critical: false\n")
            a, b = results[("a", 0)], results[("b", 0)]
            for k, (ra, rb) in enumerate(zip(a["rounds"], b["rounds"])):
                self.assertEqual(ra[:8 * HIDDEN], rb[:8 * HIDDEN], f"round {k + 1}")
            self.assertNotEqual(a["rounds"][0][8 * HIDDEN:], b["rounds"][0][8 * HIDDEN:])
        print(f"2 regions x 2 ranks, critical tensors out of streaming: {time.monotonic() - t0:.1f} s")

    def test_when_the_leader_cannot_connect_every_rank_of_its_group_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            # A port that is bound but never listens: the leader's connection is refused.
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.addCleanup(s.close)
            servers = json.dumps({"a": f"tcp://127.0.0.1:{s.getsockname()[1]}"})
            results = self.launch(tmp, "-", ("a",), extra=(servers,))
            self.assertRegex(results[("a", 0)].get("error", ""), "RuntimeError: .*no connection")
            self.assertRegex(results[("a", 1)].get("error", ""),
                             "RuntimeError: .*leader of region 'a'.*could not connect")


if __name__ == "__main__":
    geotrain = _support.import_geotrain()
    torch = _support.import_torch()
    if torch is None:
        _support.skip("torch is not installed (scripts/bootstrap.sh installs python3-torch)")
    BINARY = _support.binary()
    # The ranks fork from a clean server process that imports these once.
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "geotrain.torch",
                                            "test_multirank"])
    unittest.main()
