"""geotrain for PyTorch: OuterSync, a region's leader in a few lines (docs/python.md).

    sync = OuterSync(model, config="runs/<run>/config.yaml", region="us-east")
    while sync.training:                               # rounds x H steps (range(total_steps))
        loss = train_step(model, opt, next(batches))   # your forward, backward, opt.step()
        sync.step(loss=loss)                           # every H steps: the WAN exchange
    sync.finish()

With time-budgeted rounds (worker.round_time_ms), a round takes the steps that fit in the
budget at the region's pace, not H: loop while sync.training.

Every H = worker.local_steps calls, step() pushes the region's compressed delta (local -
global base, error feedback on) to every region's server and pulls the new global parameters
into the model, in place: the C++ RegionSync driven by StreamingSync, exactly as in the native
worker, with the codecs, staleness bound, overlap mode (worker.overlap: false | true | eager |
delayed), streaming fragments (worker.fragments, worker.fragment_delay) and servers of the
deployment config. Without overlap or fragments it only counts between rounds.

Inside a region, your own torch.distributed group does the AllReduce of gradients. Build
OuterSync on every rank of that group (process_group=...): rank 0 is the region's leader and
talks to the servers; after every step where its exchange changed the parameters the others
receive them from it by broadcast. Or build it on rank 0 only and broadcast yourself.

With CURVE (security.curve in the config, or keys_dir=...), the leader connects as a CURVE
client with its region's keys; a server that refuses the handshake raises
geotrain.HandshakeError (a ConnectionError) at construction, naming the server and the reason.
"""

import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from geotrain import _core
from geotrain.metrics import MetricsLog, worker_metrics_path

__all__ = ["OuterSync", "named_tensors"]


def named_tensors(model):
    """[(name, parameter)] of an nn.Module, an iterable of (name, tensor) pairs, or an iterable
    of tensors (named "0", "1", ...), in order."""
    if isinstance(model, torch.nn.Module):
        return list(model.named_parameters())
    items = list(model)
    if items and isinstance(items[0], (tuple, list)):
        return [(str(n), p) for n, p in items]
    return [(str(i), p) for i, p in enumerate(items)]


def _global_rank(group, rank):
    if group is None:
        return rank
    get = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return get(group, rank)


# OuterSync's keyword arguments and the config keys they set (None: Python's own).
_OVERRIDE_KEYS = {
    "local_steps": "worker.local_steps", "rounds": "worker.rounds", "critical": "model.critical",
    "critical_codec": "worker.critical_codec", "noncritical_codec": "worker.noncritical_codec",
    "chunk_align": "worker.chunk_align", "staleness_bound": "server.staleness_bound",
    "overlap": "worker.overlap", "fragments": "worker.fragments",
    "fragment_delay": "worker.fragment_delay", "stream_critical": "worker.stream_critical",
    "outer": "server.optimizer", "timeout_ms": "worker.timeout_ms", "run_dir": "worker.run_dir",
    "curve": "security.curve", "keys_dir": "security.keys_dir",
    "streams_per_server": "worker.streams_per_server", "link_mbps": "worker.link_mbps",
    "socket_buffer_kib": "worker.socket_buffer_kib", "error_feedback": "worker.error_feedback",
    "shard_wait_ms": "worker.shard_wait_ms", "model_name": None,
}


class OuterSync:
    """The WAN part of a region's training loop, wrapped around a torch model's parameters.

    model      nn.Module, [(name, tensor)] or [tensor]: the parameters to synchronise. Their
               names and sizes, in order, must be the servers' table (model.tensors, or the
               native model the config names).
    config     a deployment config (YAML), normally the run folder's config.yaml that
               `geotrain serve` / `geotrain run` (worker.external: true) wrote: server
               endpoints, routes through netsim, codecs, H, staleness, overlap, run_dir.
    region     this region's name (one of the config's regions).
    servers    {region: endpoint} instead of a config (then pass the other settings here).
    Keyword arguments override the config: local_steps (H), critical (globs),
    critical_codec, noncritical_codec (a spec, or a schedule [{"until_round": 10, "codec":
    "int8"}, {"codec": "onebit"}]), chunk_align ("segment"/"tensor"), staleness_bound,
    overlap (False/True/"eager"/"delayed"),
    fragments, fragment_delay, stream_critical, outer ({lr, momentum, nesterov}:
    server.optimizer), timeout_ms, streams_per_server (0: auto), link_mbps, socket_buffer_kib,
    error_feedback ({decay}: worker.error_feedback), shard_wait_ms,
    run_dir; keys_dir (CURVE with this region's keys, the folder `geotrain keygen` wrote) and
    curve (False: no CURVE), which default to the config's security section.
    process_group  the region's torch.distributed group (default: the default group when one is
               initialised); its rank 0 leads.
    metrics    write <run_dir>/worker-<region>-0.metrics.jsonl (leader only), which `geotrain
               serve` reads for progress, the summary and the report.

    Every region must start from the same parameters (seed the model's initialisation
    identically): the servers hold the sum of the regions' deltas from that common start.
    """

    def __init__(self, model, config=None, region=None, *, servers=None, process_group=None,
                 metrics=True, **overrides):
        self.region = region
        self._named = named_tensors(model)
        if not self._named:
            raise ValueError("OuterSync: the model has no parameters")
        s = self._settings(config, region, servers, overrides)
        self.settings = s
        self.local_steps = int(s["local_steps"])
        self.rounds = int(s["rounds"])
        # At H steps a round; time-budgeted rounds (round_time_ms > 0) take as many as fit.
        self.total_steps = self.local_steps * self.rounds
        self.round_time_ms = float(s.get("round_time_ms", 0))
        self._check_table(s["tensors"])
        self.curve = s["curve"]  # every server link is CURVE (keys from s["keys_dir"])
        # When each fragment is pushed and merged: the config's until the leader has connected,
        # then the leader's (the servers' fragment count, from their hellos).
        self._schedule = _core.FragmentSchedule(self.local_steps, int(s["fragments"]),
                                                self._merge_delay(s))

        self._group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._group_size = dist.get_world_size(process_group) if distributed else 1
        self.is_leader = self.rank == 0

        self._flatten()
        self._leader = None
        self._log = None
        self.round = 1
        self.steps = 0
        self._merged = []  # the exchanges merged during this round (leader)
        self.rounds_done = 0
        self.last_report = None
        self._finished = False
        self._round_compute = 0.0
        self._round_wait = 0.0
        self._in_round = 0  # steps of the round under way
        self._round_steps = self.local_steps  # its count (time-budgeted rounds: planned)
        self._budget = None
        if self.round_time_ms > 0 and self.is_leader:
            self._budget = _core.RoundBudget(self.round_time_ms / 1000.0,
                                             int(s["max_local_steps"]), self.local_steps)
        self._last_step_end = time.monotonic()
        self._start = time.monotonic()

        failure = None
        if self.is_leader:
            try:
                self._connect(s, region, metrics)
            except Exception as e:  # the other ranks are told below, then it is raised
                failure = e
        if self._group_size > 1:
            # Every rank follows the leader's schedule: its first round, and the fragment count
            # and delay the servers' hellos set (they replace the config's where they differ).
            first = torch.tensor([self.round if failure is None else -1, self.fragments,
                                  self._schedule.delay], dtype=torch.int64)
            dist.broadcast(first, src=_global_rank(self._group, 0), group=self._group)
            if int(first[0].item()) < 0 and failure is None:
                raise RuntimeError(f"OuterSync: the leader of region '{region}' (rank 0 of the "
                                   "process group) could not connect to the servers; its "
                                   "exception says why")
            self.round = int(first[0].item())
            self._schedule = _core.FragmentSchedule(self.local_steps, int(first[1].item()),
                                                    int(first[2].item()))
        if failure is not None:
            raise failure
        self._first_step = (self.round - 1) * self.local_steps  # global steps before this run
        self._calendar = _core.MergeCalendar(self._schedule)
        self._plan_round()
        self._broadcast()
        self._last_step_end = time.monotonic()  # the first step's time starts here

    def _connect(self, s, region, metrics):
        """The leader's side of construction: the RegionSync (CURVE keys read here), the
        connection (every server's handshake checked first), the global values, and then the
        `start` event (so a leader that was refused leaves nothing in the run's metrics)."""
        # Planned from the config text (with this OuterSync's arguments applied to it) by the
        # parser and planner the native worker uses: every key that shapes a leader reaches it.
        leader = _core.RegionSync.from_config(
            [(n, int(p.numel())) for n, p in self._named], s["config_text"], s["source"], region,
            matrix_cols=[int(p.shape[-1]) if p.dim() >= 2 else 0 for _, p in self._named])
        self._gather()
        self.round = int(leader.connect(self._flat_np))
        # The servers' fragment count (their hellos), and the delay that follows from it.
        self._schedule = leader.schedule
        leader.copy_base(self._flat_np)
        self._scatter()
        self._leader = leader
        if metrics:
            self._log = MetricsLog(worker_metrics_path(s["run_dir"], region, 0))
            self._log.write("start", _core.start_event(
                s["config_text"], s["source"], region, len(s["regions"]) * self._group_size,
                s.get("model_name", "torch"), self.size, self.fragments, self._schedule.delay))

    # -- settings -------------------------------------------------------------------------

    def _settings(self, config, region, servers, overrides):
        """What the leader of `region` runs: the config's text (or, with servers= alone, one
        made here) with the keyword arguments applied as `--set` overrides, read by the native
        worker's parser (leader_settings). Keeps the text, which the leader is planned from."""
        if region is None:
            raise ValueError("OuterSync: region is required (one of the config's regions)")
        for key in overrides:
            if key not in _OVERRIDE_KEYS:
                raise TypeError(f"OuterSync: unknown argument '{key}' "
                                f"(allowed: {', '.join(sorted(_OVERRIDE_KEYS))})")
        if config is not None:
            with open(config, encoding="utf-8") as f:
                text, source = f.read(), str(config)
        else:
            if not servers:
                raise ValueError("OuterSync: pass config=... or servers={region: endpoint}")
            if region not in servers:
                raise ValueError(f"OuterSync: region '{region}' is not in servers "
                                 f"(allowed: {', '.join(servers)})")
            # This model's table, workers of your own, a single round of one step unless the
            # arguments say more, and the timeout and run folder the Python API documents.
            table = [{"name": n, "size": int(p.numel())} for n, p in self._named]
            text = json.dumps({"regions": list(servers), "model": {"tensors": table}, "worker": {
                "external": True, "local_steps": 1, "rounds": 1, "timeout_ms": 120000,
                "run_dir": os.path.join("runs", "python")}})
            source = "OuterSync(servers=...)"
        sets = []
        if servers:  # the endpoints this region dials (routes already applied)
            sets += [f"regions={json.dumps(list(servers))}",
                     f"server.endpoints={json.dumps(dict(servers))}"]
        given = {k: v for k, v in overrides.items() if v is not None}
        if "keys_dir" in given and "curve" not in given:
            given["curve"] = True  # keys_dir alone turns CURVE on
        if "keys_dir" in given:
            given["keys_dir"] = os.fspath(given["keys_dir"])
        for key, value in given.items():
            path = _OVERRIDE_KEYS[key]
            if path is not None:
                sets.append(f"{path}={json.dumps(value)}")
        text, source = _core.with_overrides(text, sets, source)
        s = dict(_core.leader_settings(text, source, region))
        s["config_text"], s["source"] = text, source
        if "model_name" in given:
            s["model_name"] = given["model_name"]
        s["curve"] = bool(s["security"]["curve"])
        s["keys_dir"] = s["security"]["keys_dir"]
        if s["curve"] and not s["keys_dir"]:
            raise ValueError("OuterSync: CURVE is on but no keys_dir is given (the folder "
                             "`geotrain keygen` wrote: keys_dir=... or security.keys_dir)")
        return s

    @property
    def fragments(self):
        """P, the streaming fragments this region follows (the servers' count once connected)."""
        return self._schedule.fragments

    @staticmethod
    def _merge_delay(s):
        """Steps from a fragment's push to its merge (WorkerConfig::merge_delay, in C++)."""
        delay = s["fragment_delay"]
        return _core.merge_delay(int(s["local_steps"]), int(s["fragments"]), s["overlap"],
                                 None if delay is None else int(delay))

    def _check_table(self, tensors):
        if not tensors:
            return  # no table in the config: the servers compare layout hashes at connect
        mine = [(n, int(p.numel())) for n, p in self._named]
        theirs = [(str(n), int(k)) for n, k in tensors]
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a != b:
                raise ValueError(f"OuterSync: parameter {i} is {a[0]} ({a[1]} values) but the "
                                 f"config's table has {b[0]} ({b[1]} values) there; the model's "
                                 "named parameters must be the servers' model.tensors, in order "
                                 "(geotrain.deployment.config_for_model writes such a config)")
        if len(mine) != len(theirs):
            raise ValueError(f"OuterSync: the model has {len(mine)} parameters, the config's "
                             f"table {len(theirs)}")

    # -- the flat buffer ------------------------------------------------------------------

    def _flatten(self):
        """One float32 CPU buffer in the table's order. CPU float32 parameters become views of
        it (no copies at round boundaries); others are staged through it."""
        params = [p for _, p in self._named]
        self.size = sum(int(p.numel()) for p in params)
        self._views = all(p.device.type == "cpu" and p.dtype == torch.float32 for p in params)
        self._flat = torch.empty(self.size, dtype=torch.float32)
        offset = 0
        self._slices = []
        with torch.no_grad():
            for p in params:
                n = int(p.numel())
                view = self._flat[offset:offset + n]
                view.copy_(p.detach().reshape(-1))
                if self._views:
                    p.data = view.view_as(p)
                self._slices.append((offset, n))
                offset += n
        self._flat_np = self._flat.numpy()  # shares memory with self._flat

    def _gather(self):
        if self._views:
            return
        with torch.no_grad():
            for (off, n), (_, p) in zip(self._slices, self._named):
                self._flat[off:off + n].copy_(p.detach().reshape(-1))

    def _scatter(self):
        if self._views:
            return
        with torch.no_grad():
            for (off, n), (_, p) in zip(self._slices, self._named):
                p.copy_(self._flat[off:off + n].view_as(p))

    def _broadcast(self):
        if self._group_size <= 1:
            return
        self._gather()
        dist.broadcast(self._flat, src=_global_rank(self._group, 0), group=self._group)
        self._scatter()

    # -- the loop -------------------------------------------------------------------------

    @property
    def training(self):
        """Whether rounds remain: loop `while sync.training` (time-budgeted rounds vary their
        steps; with fixed H it is range(total_steps))."""
        return self.round <= self.rounds

    @property
    def schedule_position(self):
        """Where the learning-rate schedule stands after the steps so far, in steps at H a
        round: (round - 1) x H + h x H / k after step h of a round of k (= the step count with
        fixed H). Time-budgeted rounds: every region warms up and decays together by it, as the
        native workers do (docs/training.md, "Uneven regions")."""
        return ((self.round - 1) * self.local_steps +
                self._in_round * self.local_steps / self._round_steps)

    def _plan_round(self):
        """The count of the round about to start: H, or with time-budgeted rounds the leader's
        RoundBudget plan, which every rank of the region takes by broadcast."""
        if self.round_time_ms <= 0:
            return
        steps = self._budget.plan() if self._budget is not None else 0
        if self._group_size > 1:
            count = torch.tensor([steps], dtype=torch.int64)
            dist.broadcast(count, src=_global_rank(self._group, 0), group=self._group)
            steps = int(count.item())
        self._round_steps = steps

    def step(self, loss=None, **fields):
        """Call once per local step, after opt.step(). Runs the exchanges due after this step
        (StreamingSync::after_step): every local_steps calls (time-budgeted rounds: the round's
        planned count) the round boundary, where it returns True; otherwise False. Without
        overlap the parameters then hold the new global values; with overlap they are merged
        `fragment_delay` steps after their push (one round late by default); with fragments, a
        fragment's exchange may also change its part of the parameters between round
        boundaries. `loss` (a float or a tensor) and other numeric
        fields go into the step's metrics event."""
        if not self.training:
            raise RuntimeError(f"OuterSync.step: the run's {self.rounds} rounds are done (loop "
                               "`while sync.training`, then call finish())")
        now = time.monotonic()
        compute = now - self._last_step_end
        self._round_compute += compute
        if self._budget is not None:
            self._budget.record_step(compute)
        self.steps += 1
        self._in_round += 1
        if self._log:
            event = _core.step_event(self.region, self.round, self.steps, compute,
                                     loss=None if loss is None else float(loss))
            event.update({k: float(v) for k, v in fields.items()})
            self._log.write("step", event)
        # The step over the run ((round - 1) * H + h + 1 with fixed H) and its place in a round
        # of the planned count, as the native trainer passes them.
        global_step = self._first_step + self.steps
        changes = self._calendar.changes_after(global_step, self._in_round, self._round_steps)
        if self._leader is not None:
            t0 = time.monotonic()
            if changes:
                self._gather()
            # Reads and writes the buffer only when something is due (`changes`); otherwise it
            # only keeps the servers' heartbeats going.
            self._merged += self._leader.after_step(global_step, self._flat_np, self._in_round,
                                                    self._round_steps)
            if changes:
                self._scatter()
            self._round_wait += time.monotonic() - t0
        if changes:
            self._broadcast()
        boundary = self._in_round == self._round_steps
        if boundary:
            self._boundary()
            if self.training:
                self._plan_round()
        self._last_step_end = time.monotonic()
        return boundary

    def _boundary(self):
        reports, self._merged = self._merged, []
        self.last_report = reports[-1] if reports else None
        # The exchange fields as the native trainer writes them (worker/run/worker_events.hpp).
        fields = self._leader.take_round_fields() if self._leader is not None else {}
        if self._log:
            self._log.write("round", _core.round_event(self.region, self.round,
                                                       self._round_steps, self._round_compute,
                                                       self._round_wait, fields))
        self._round_compute = 0.0
        self._round_wait = 0.0
        self._in_round = 0
        self.round += 1
        self.rounds_done += 1

    def log_eval(self, **fields):
        """Records an evaluation: test_accuracy / test_loss (classifiers) or val_loss / val_bpb
        / val_accuracy (language models), as the native worker's `eval` event."""
        if self._log:
            event = _core.eval_event(self.region, self.round - 1, self.steps)
            event.update({k: float(v) for k, v in fields.items()})
            self._log.write("eval", event)

    def finish(self, evaluate=None, **final_eval):
        """The end of training (StreamingSync::finish): with overlap, waits for the exchanges in
        flight and merges them; with fragments, exchanges (blocking) every fragment whose last
        push is older than the last step. Then, after the last round, the end of a run as the
        native worker's (docs/training.md, "The end of a run"): the leader flushes what it did
        not push yet and every rank's parameters become the global model, the mean of what the
        regions hold (the `flush` event); the first region's leader writes it to
        <run_dir>/model.safetensors under the model's parameter names. A flush that fails leaves
        the region's own parameters (`global_model` false in `done`, with the reason).

        final_eval: figures of this region's own parameters, evaluated before finish()
        (test_accuracy / val_bpb / val_loss: region_* in `done`). evaluate: a callable that
        returns such figures, called on every rank once the parameters are the global model
        (final_* in `done`); without it, final_* are final_eval's. Logs the final evaluation and
        the `done` event, and writes the final parameters to <run_dir>/params-<region>.f32.
        Idempotent."""
        if self._finished:
            return
        self._finished = True
        global_model, global_error = False, "no flush: this process is not the region's leader"
        if self._leader is not None:
            self._gather()
            # The native leaders' end (worker::end_exchange): the exchanges in flight, their
            # events, the flush to the global model after the last round, and the goodbye.
            unlogged = self._merged[-1]["round"] if self._merged else None
            end = self._leader.end(self._first_step + self.steps, self._flat_np,
                                   flush_follows=self.round > self.rounds, log=self._log,
                                   unlogged_round=unlogged)
            reports, self._merged = self._merged + end["reports"], []
            self._scatter()
            if reports:
                self.last_report = reports[-1]
            global_model, global_error = end["global_model"], end["error"]
            if global_model and self.region == self.settings["regions"][0]:
                self._write_global_model()
            # Disconnect now, before `done` tells `geotrain serve` it may stop the servers: the
            # RegionSync's background thread (overlap) heartbeats them until it is destroyed,
            # and a heartbeat to a server that is gone would hold its destruction for up to
            # the timeout.
            self._leader = None
        self._broadcast()
        figures = dict(final_eval)
        if evaluate is not None:
            figures = dict(evaluate())  # on every rank: the user's evaluation may be collective
        if self._log:
            if figures:
                self.log_eval(**figures)
            done = _core.done_event(self.region, self.rounds_done, self.steps,
                                    time.monotonic() - self._start)
            # region_* and, only with a global model, final_*: the native leaders' rule.
            done.update(_core.end_figures({k: float(v) for k, v in final_eval.items()},
                                          {k: float(v) for k, v in figures.items()}
                                          if global_model else None, global_error or ""))
            self._log.write("done", done)
            self._log.close()
            self._gather()
            _core.write_region_params(self.settings["run_dir"], self.region, self._flat_np)

    def _write_global_model(self):
        """<run_dir>/model.safetensors: the global model under the model's parameter names and
        shapes, as the native leaders write it."""
        tensors = [(name, [int(d) for d in p.shape], self._flat_np[off:off + n])
                   for (name, p), (off, n) in zip(self._named, self._slices)]
        _core.write_global_model(self.settings["run_dir"], tensors, self.rounds_done)

    def close(self):
        """Drops the connections (finish() does too; close() without finish() abandons the
        exchanges in flight)."""
        self._leader = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        self.close()
        return False

    @property
    def parameters(self):
        """The flat float32 CPU tensor in the table's order (the parameters' storage when they
        are CPU float32)."""
        return self._flat
