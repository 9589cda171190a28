#!/usr/bin/env bash
# Installs everything geotrain needs to build, test and run, from Debian packages only.
# Idempotent: when every package is already installed it does nothing (no apt-get update).
# CUDA, cuBLAS and NCCL are not installed here; the build uses /usr/local/cuda when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libzmq3-dev cppzmq-dev
  libcapnp-dev capnproto
  libzstd-dev zlib1g-dev libxxhash-dev
  libspdlog-dev libfmt-dev
  doctest-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libopenblas-dev libgloo-dev
  python3 python3-matplotlib
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "bootstrap: done"
