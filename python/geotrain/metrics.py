"""The worker metrics file (docs/run-folder.md, "Worker metrics"), written from Python.

A Python leader writes the same events as the native leader (worker/run/metrics_log.hpp): one JSON
object per line with "event" and "time" (seconds since the log was opened), flushed per line,
so that `geotrain run`/`geotrain serve` show its progress and summarize the run the same way.
Every line is held to the events' schema (core/metrics_events.json, through geotrain._core):
an event or field it does not name raises ValueError, except the user's own fields in the
events that take them (`step`, `eval`).
"""

import json
import os
import time

from geotrain import _core


def worker_metrics_path(run_dir, region, rank=0):
    return os.path.join(run_dir, f"worker-{region}-{rank}.metrics.jsonl")


class MetricsLog:
    """Appends events to one JSONL file. One writer thread."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")
        self._start = time.monotonic()

    def seconds(self):
        return time.monotonic() - self._start

    def write(self, event, fields):
        wrong = _core.check_event(event, list(fields), strict=False)
        if wrong:
            raise ValueError(f"metrics event: {wrong}")
        record = dict(fields)
        record["event"] = event
        record["time"] = self.seconds()
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self):
        if not self._file.closed:
            self._file.close()
