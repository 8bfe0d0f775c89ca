#!/usr/bin/env bash
# The control-plane figures of docs/performance.md: runs `store_bench
# --scenario control --json` (arguments go to it, e.g. --keys 100000) and
# writes control.json, control.dat and control.png (exists and get latency
# against the index's size) into results/control-DATE/ (or $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/control-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
build/bin/store_bench --scenario control --json "$@" > "$OUT/control.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/control.json"))
with open(f"{out}/control.dat", "w") as f:
    f.write("# keys exists_p50_us exists_p99_us get_p50_us server_rss_mb\n")
    for p in r["points"]:
        f.write(f'{p["keys"]} {p["exists_p50_us"]} {p["exists_p99_us"]} {p["get_p50_us"]} '
                f'{p["server_rss"] / 1e6:.1f}\n')
PY
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output "$OUT/control.png"
set title "meshstore control plane: latency as the index grows (2 vCPUs, loopback)"
set logscale x
set xlabel "keys in the index"
set ylabel "microseconds"
set yrange [0:*]
set key top left
plot "$OUT/control.dat" using 1:2 with linespoints title "exists p50", \
     "$OUT/control.dat" using 1:3 with linespoints title "exists p99", \
     "$OUT/control.dat" using 1:4 with linespoints title "get (4 bytes) p50"
GP
fi
cat "$OUT/control.json"
echo "run_control: results in $OUT"
