"""The worker metrics events' schema (core/metrics_events.json) as each reader sees it: the C++
names compiled into geotrain._core, the scripts' reader (scripts/metrics_schema.py) and the
Python API's writer all agree with the file, and docs/run-folder.md describes every field."""

import json
import os
import re
import sys
import tempfile
import unittest

import _support

geotrain = _support.import_geotrain()
from geotrain import _core  # noqa: E402
from geotrain.metrics import MetricsLog  # noqa: E402

SOURCE = _support.source_dir()
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
import metrics_schema  # noqa: E402


def schema_file():
    with open(os.path.join(SOURCE, "core", "metrics_events.json"), encoding="utf-8") as f:
        return json.load(f)


class MetricsSchema(unittest.TestCase):
    def test_the_compiled_names_are_the_files(self):
        schema = schema_file()
        compiled = _core.metrics_events()
        self.assertEqual(compiled["common"], schema["common"])
        for e in schema["events"]:
            self.assertEqual(compiled[e["name"]]["fields"], e["fields"], e["name"])
            self.assertEqual(compiled[e["name"]]["extensible"], e.get("extensible", False))
        self.assertEqual(len(compiled) - 1, len(schema["events"]))

    def test_the_scripts_read_the_same_schema(self):
        schema = schema_file()
        events = metrics_schema.load()
        for e in schema["events"]:
            self.assertEqual(events[e["name"]], set(e["fields"]) | set(schema["common"]))
        self.assertEqual(metrics_schema.field("round", "bytes_pushed"), "bytes_pushed")
        with self.assertRaisesRegex(KeyError, "no field 'bytes'"):
            metrics_schema.field("round", "bytes")

    def test_the_scripts_read_summary_keys_from_core_run_summary_json(self):
        with open(os.path.join(SOURCE, "core", "run_summary.json"), encoding="utf-8") as f:
            schema = json.load(f)
        objects = metrics_schema.load_summary()
        for o in schema["objects"]:
            self.assertEqual(objects[o["name"]], set(o["fields"]))
        self.assertEqual(metrics_schema.summary_key("wall_seconds"), "wall_seconds")
        self.assertEqual(metrics_schema.summary_key("wait_seconds", "per_region"), "wait_seconds")
        with self.assertRaisesRegex(KeyError, "no field 'wall'"):
            metrics_schema.summary_key("wall")

    def test_the_docs_describe_every_summary_key(self):
        with open(os.path.join(SOURCE, "docs", "run.md"), encoding="utf-8") as f:
            text = f.read()
        results = text[text.index("- **Results**"):text.index("- **Per region**")]
        rows = "\n".join(line for line in results.splitlines() if line.strip().startswith("| `"))
        with open(os.path.join(SOURCE, "core", "run_summary.json"), encoding="utf-8") as f:
            top = next(o for o in json.load(f)["objects"] if o["name"] == "summary")
        for key in top["fields"]:
            self.assertIn(f"`{key}`", rows, f"docs/run.md's Results table does not name `{key}`")

    def test_the_python_writer_refuses_what_the_schema_does_not_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = MetricsLog(os.path.join(tmp, "m.jsonl"))
            log.write("round", {"region": "a", "round": 1, "bytes_pushed": 10})
            log.write("eval", {"region": "a", "round": 1, "my_metric": 0.5})  # extensible
            with self.assertRaisesRegex(ValueError, "field 'bytes_pushd'"):
                log.write("round", {"region": "a", "bytes_pushd": 10})
            with self.assertRaisesRegex(ValueError, "event 'rounds'"):
                log.write("rounds", {"region": "a"})
            log.close()
            with open(os.path.join(tmp, "m.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([e["event"] for e in lines], ["round", "eval"])

    def test_the_docs_describe_every_field(self):
        with open(os.path.join(SOURCE, "docs", "run-folder.md"), encoding="utf-8") as f:
            rows = {m.group(1): m.group(0) for m in
                    re.finditer(r"^\| `([a-z_]+)` \| [^\n]*$", f.read(), re.MULTILINE)}
        for e in schema_file()["events"]:
            self.assertIn(e["name"], rows, f"docs/run-folder.md has no row for `{e['name']}`")
            for name in e["fields"]:
                self.assertIn(f"`{name}`", rows[e["name"]],
                              f"docs/run-folder.md's `{e['name']}` row does not name `{name}`")


if __name__ == "__main__":
    unittest.main()
