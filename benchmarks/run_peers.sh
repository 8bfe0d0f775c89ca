#!/usr/bin/env bash
# Runs every contender of peer_bench on every workload and writes the table
# and the JSON into results/peers-DATE/ (docs/performance.md). Arguments go
# to peer_bench (for example --smoke, --iters 5, --workloads qwen).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/bin/peer_bench ]; then
  echo "run_peers: build first: bash scripts/setup.sh && bash scripts/build.sh" >&2
  exit 1
fi
OUT=results/peers-$(date +%Y%m%d-%H%M%S)
build/bin/peer_bench --out "$OUT" "$@"
echo "run_peers: results in $OUT"
