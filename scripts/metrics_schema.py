"""The worker metrics events' names, read from core/metrics_events.json: the one definition that
the C++ writers (the generated core/metrics_events.hpp) and the Python API (geotrain._core) use
too. A script names each field it reads through `field(event, name)`, which fails at once, with
the event and the field, when the schema does not give that event that field, rather than
plotting nothing after a rename."""

import json
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "core",
                     "metrics_events.json")


def load(path=_PATH):
    """{event: set of its fields, the common ones (event, time) included}."""
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    common = set(schema["common"])
    return {e["name"]: common | set(e["fields"]) for e in schema["events"]}


_EVENTS = load()


def field(event, name):
    """`name`, after checking that the schema gives `event` that field (KeyError otherwise)."""
    if event not in _EVENTS:
        raise KeyError(f"core/metrics_events.json has no event '{event}'")
    if name not in _EVENTS[event]:
        raise KeyError(f"core/metrics_events.json gives event '{event}' no field '{name}'")
    return name
