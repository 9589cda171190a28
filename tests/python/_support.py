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
