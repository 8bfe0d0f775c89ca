#!/usr/bin/env bash
# The small-operation figures of docs/performance.md: runs `store_bench
# --scenario small --json` (arguments go to it, e.g. --transport tcp) and
# writes small.json, small.dat and small.png (put + get_into p50/p99 against
# the value's size, next to Redis SET + GET; each get alone dashed) into results/small-DATE/ (or
# $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/small-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
build/bin/store_bench --scenario small --json "$@" > "$OUT/small.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/small.json"))
with open(f"{out}/small.dat", "w") as f:
    f.write("# bytes p50_us p99_us redis_p50_us redis_p99_us get_p50_us redis_get_p50_us\n")
    for p in r["sizes"]:
        f.write(f'{p["bytes"]} {p["p50_us"]} {p["p99_us"]} {p["redis_p50_us"]} {p["redis_p99_us"]} '
                f'{p["get_p50_us"]} {p["redis_get_p50_us"]}\n')
PY
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output "$OUT/small.png"
set title "small values across two processes: put + get_into against Redis SET + GET (2 vCPUs)"
set logscale x 2
set xtics ("64" 64, "256" 256, "1K" 1024, "4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576)
set logscale y
set xlabel "value bytes"
set ylabel "microseconds (log)"
set key top left
plot "$OUT/small.dat" using 1:2 with linespoints title "meshstore p50", \
     "$OUT/small.dat" using 1:3 with linespoints title "meshstore p99", \
     "$OUT/small.dat" using 1:4 with linespoints title "Redis p50 (TCP loopback)", \
     "$OUT/small.dat" using 1:5 with linespoints title "Redis p99 (TCP loopback)", \
     "$OUT/small.dat" using 1:6 with linespoints dashtype 2 title "meshstore get_into alone p50", \
     "$OUT/small.dat" using 1:7 with linespoints dashtype 2 title "Redis GET alone p50"
GP
fi
cat "$OUT/small.json"
echo "run_small: results in $OUT"
