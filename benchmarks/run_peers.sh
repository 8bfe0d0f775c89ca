#!/usr/bin/env bash
# The one command for the side-by-side benchmark (docs/performance.md):
# installs what every contender needs (scripts/setup.sh: Redis, python3-torch
# for gloo, Open MPI, gnuplot), builds, runs every contender on every
# workload, and writes results.md, results.json, results.dat and results.png
# into results/peers-DATE/ (or --out DIR). Other arguments go to peer_bench
# (for example --smoke, --iters 5, --workloads qwen, --contenders mpi,meshstore).
# MESHSTORE_SKIP_SETUP=1 skips the install and build steps.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${MESHSTORE_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
  bash scripts/build.sh
fi
OUT=results/peers-$(date +%Y%m%d-%H%M%S)
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --out ] && [ $# -gt 1 ]; then
    OUT=$2
    shift 2
  else
    args+=("$1")
    shift
  fi
done
build/bin/peer_bench --out "$OUT" "${args[@]}"
echo "run_peers: results in $OUT"
