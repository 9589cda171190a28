#!/usr/bin/env bash
# geotrain's main job: installs what running needs (scripts/bootstrap.sh run), builds the
# `geotrain` binary alone (preset `run`: no tests, no Python module; the same build folder as the
# test command's, which builds the rest), then runs `geotrain run` on the demo config (extra
# arguments go to `geotrain run`, e.g. another config or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh run
cmake --preset run
cmake --build --preset run
build/bin/geotrain run "$@"
