"""The worker metrics file (docs/run-folder.md, "Worker metrics"), written from Python.

A Python leader writes its events with the native leader's own writer (worker/run/metrics_log.hpp,
through geotrain._core): one JSON object per line with "event" and "time" (seconds since the log
was opened), flushed per line, so that `geotrain run`/`geotrain serve` show its progress and
summarize the run the same way. Every line is held to the events' schema
(core/metrics_events.json): an event or field it does not name raises ValueError, except the
user's own fields in the events that take them (`step`, `eval`). The events' fields come from
the native builders too (geotrain._core.step_event, round_event, eval_event).
"""

from geotrain._core import MetricsLog, worker_metrics_path

__all__ = ["MetricsLog", "worker_metrics_path"]
