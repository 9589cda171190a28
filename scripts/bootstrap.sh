#!/usr/bin/env bash
# Installs what geotrain needs, from Debian packages only, then writes the default text corpus
# (the King James Bible, scripts/kjv.sh) when it is missing or empty. Idempotent: when every
# package and the corpus are present it does nothing (no apt-get update).
#   bootstrap.sh run   what building the `geotrain` binary and running it needs (scripts/demo.sh):
#                      the libraries it links, the data, matplotlib for the plots
#   bootstrap.sh       everything the tests need (scripts/test.sh): the above plus doctest,
#                      PyTorch (the tests' reference), pybind11, prometheus_client, iproute2,
#                      Open MPI's mpirun, and Slurm's daemons with munge (test_slurm starts its own)
#   bootstrap.sh fuzz  the above plus clang and its libFuzzer, for fuzzing campaigns (the CMake
#                      preset `fuzz`, docs/fuzzing.md); the test command replays the corpora
#                      without them
# CUDA, cuBLAS and NCCL are not installed here; the build uses /usr/local/cuda when present.
set -euo pipefail

mode=${1:-all}
case $mode in run | all | fuzz) ;; *) echo "bootstrap: unknown mode '$mode' (run, all or fuzz)" >&2; exit 2 ;; esac

packages=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev
  libcapnp-dev capnproto
  libzstd-dev zlib1g-dev libxxhash-dev
  libspdlog-dev libfmt-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libopenblas-dev libgloo-dev
  python3 python3-matplotlib python3-numpy
  dataset-fashion-mnist bible-kjv bible-kjv-text
)
if [ "$mode" != run ]; then
  packages+=(
    git doctest-dev
    python3-torch python3-dev pybind11-dev
    python3-prometheus-client  # tests/python: the /metrics endpoints read by an independent parser
    iproute2                   # test_netns: regions on hosts of their own (network namespaces)
    openmpi-bin                # test_mpirun: a deployment launched by mpirun (docs/deploy.md)
    slurmctld slurmd slurm-client munge  # test_slurm: a Slurm of its own runs the job script
  )
fi
if [ "$mode" = fuzz ]; then
  # The libFuzzer build of fuzz/ (docs/fuzzing.md): Debian's clang, and its compiler-rt, which
  # holds libFuzzer and the sanitizer runtimes (clang only recommends it).
  packages+=(clang libclang-rt-dev)
fi
corpus=/usr/local/share/geotrain/kjv.txt

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ] && [ -s "$corpus" ]; then
  echo "bootstrap ($mode): all ${#packages[@]} packages present, corpus $corpus present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -s "$corpus" ]; then
  echo "bootstrap: writing the default text corpus $corpus"
  $SUDO bash "$(dirname "${BASH_SOURCE[0]}")/kjv.sh" "$corpus"
fi
echo "bootstrap: done"
