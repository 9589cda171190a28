"""Shared by the Python suites: imports, skips (exit 77, which ctest reports as SKIPPED) and the
paths ctest passes in (python/CMakeLists.txt)."""

import os
import sys

SKIP = 77


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def import_geotrain():
    try:
        import geotrain
    except ImportError as e:
        skip(f"the geotrain module is not built or not on PYTHONPATH ({e})")
    return geotrain


def import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def binary():
    path = os.environ.get("GEOTRAIN_BINARY")
    if not path or not os.path.exists(path):
        skip("GEOTRAIN_BINARY is not set to the geotrain binary (run through ctest)")
    return path


def source_dir():
    return os.environ.get("GEOTRAIN_SOURCE_DIR",
                          os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..")))


def prometheus_scrape(url):
    """One scrape of a /metrics endpoint, read by an independent client (urllib, and
    prometheus_client's own parser; the caller skips when it is missing): ({(name, labels as a
    sorted tuple): value}, {family: type}, the response's content type)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        content_type = r.headers["Content-Type"]
        text = r.read().decode("utf-8")
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types, content_type
