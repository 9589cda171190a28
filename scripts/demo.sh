#!/usr/bin/env bash
# Installs the dependencies, builds, and runs geotrain's main job. Until the launcher exists the
# main job is the codec benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake --preset release
cmake --build --preset release
build/bin/geotrain bench codecs "$@"
