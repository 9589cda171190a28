#!/usr/bin/env bash
# Installs every dependency (scripts/bootstrap.sh), builds everything (CUDA too when nvcc is
# present; preset `release`, the folder scripts/demo.sh builds its binary in), and runs every test
# suite. GPU suites report SKIPPED when no device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake --preset release
cmake --build --preset release
ctest --preset release --timeout 600 "$@"
