#!/usr/bin/env bash
# The simulator's validation, in one run: measures this machine (store_bench
# single and weight-sync over TRANSPORT, two processes; the four-host reads
# when root may make network namespaces), then has weightsync_sim.py predict
# the weight-sync and four-host figures from the others and prints predicted
# against measured. Then the 1T plan.
# The measurements stay in OUT (default results/validation-DATE).
#   benchmarks/sim/run_validation.sh [BINDIR] [--transport tcp|shm|cma] [--smoke]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../../build/bin}
[ $# -gt 0 ] && shift
TRANSPORTS="tcp shm" SMOKE=""
while [ $# -gt 0 ]; do
  case $1 in
    --transport) TRANSPORTS=$2; shift 2 ;;
    --smoke) SMOKE=--smoke; shift ;;
    *) echo "run_validation: unknown argument '$1'"; exit 2 ;;
  esac
done
OUT=${OUT:-$HERE/../../results/validation-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
echo "measurements in $OUT" >&2
for t in $TRANSPORTS; do
  echo "== measuring over $t" >&2
  bytes=512MiB iters=3
  [ -n "$SMOKE" ] && bytes=16MiB iters=1
  "$BIN/store_bench" --scenario single --transport "$t" --bytes "$bytes" --iters "$iters" \
    --json >"$OUT/single_$t.json"
  "$BIN/store_bench" --scenario weight-sync --transport "$t" --iters "$iters" --json \
    >"$OUT/ws_$t.json"
done
four=()
if bash "$HERE/four_hosts_bench.sh" "$BIN" $SMOKE >"$OUT/four.txt" 2>"$OUT/four.err"; then
  cat "$OUT/four.txt"
  four=(--four-hosts "$OUT/four.txt")
else
  echo "(four-host figures not measured: $(tail -1 "$OUT/four.txt" "$OUT/four.err" | tr '\n' ' '))"
fi
first=1
for t in $TRANSPORTS; do
  args=(--single "$OUT/single_$t.json" --weight-sync "$OUT/ws_$t.json")
  # The four-host rows once.
  [ "$first" -eq 1 ] && args+=("${four[@]}")
  first=0
  python3 "$HERE/weightsync_sim.py" validate "${args[@]}"
done
python3 "$HERE/weightsync_sim.py" plan
