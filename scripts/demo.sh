#!/usr/bin/env bash
# Installs the dependencies, builds, and runs geotrain's main job: `geotrain run` on the demo
# config (extra arguments go to `geotrain run`, e.g. another config or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake --preset release
cmake --build --preset release
build/bin/geotrain run "$@"
