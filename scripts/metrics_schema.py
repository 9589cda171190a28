"""The names of the run folder's records, read from the one definition the C++ writers use too:
core/metrics_events.json (the worker metrics events; the generated core/metrics_events.hpp,
and the Python API through geotrain._core) and core/run_summary.json (summary.json's keys; the
generated core/run_summary_keys.hpp). A script names each field it reads through
`field(event, name)` or `summary_key(name, obj)`, which fails at once, naming the record and the
field, when the schema does not give it, rather than plotting nothing after a rename."""

import json
import os

_CORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "core")
_PATH = os.path.join(_CORE, "metrics_events.json")
_SUMMARY_PATH = os.path.join(_CORE, "run_summary.json")


def _records(path, list_key):
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    common = set(schema.get("common", []))
    return {r["name"]: common | set(r["fields"]) for r in schema[list_key]}


def load(path=_PATH):
    """{event: set of its fields, the common ones (event, time) included}."""
    return _records(path, "events")


def load_summary(path=_SUMMARY_PATH):
    """{object: set of its keys}: summary (the top level), per_region, codec_phase, fault,
    dead_region."""
    return _records(path, "objects")


_EVENTS = load()
_SUMMARY = load_summary()


def _checked(records, file, kind, record, name):
    if record not in records:
        raise KeyError(f"core/{file} has no {kind} '{record}'")
    if name not in records[record]:
        raise KeyError(f"core/{file} gives {kind} '{record}' no field '{name}'")
    return name


def field(event, name):
    """`name`, after checking that the schema gives `event` that field (KeyError otherwise)."""
    return _checked(_EVENTS, "metrics_events.json", "event", event, name)


def summary_key(name, obj="summary"):
    """`name`, after checking that core/run_summary.json gives summary.json's object `obj` that
    key (KeyError otherwise)."""
    return _checked(_SUMMARY, "run_summary.json", "object", obj, name)
