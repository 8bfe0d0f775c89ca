#!/usr/bin/env bash
# Four hosts (network namespaces on a bridge, as tests/integration/four_hosts.sh
# makes them), each host's link shaped to RATE Mbit/s (tc tbf, both ways: each
# host's egress), measured in one run:
#   - raw:      one TCP stream of the payload from host1 to host0 (python
#               sockets): the link's goodput, the baseline;
#   - tiny:     a state dict of 4 KiB published (direct) on host1 and read on
#               host0: the fixed cost of one read (processes connect, locate,
#               tcp connection to the publisher);
#   - one:      a state dict of MIB MiB published on host1, read on host0;
#   - three:    the same read on host0, host2 and host3 at once (they share
#               host1's link).
# Each figure is the median of --iters reads (each reader a fresh process).
# Prints a table and, last, one JSON line that benchmarks/sim/weightsync_sim.py
# validate --four-hosts reads. Needs root (network namespaces); exits 77
# otherwise. Traffic stays inside the namespaces it makes.
#   four_hosts_bench.sh BINDIR [--rate MBIT] [--mib MIB] [--iters N] [--smoke]
set -u
BIN=$1
shift
RATE=1000 MIB=64 ITERS=3
while [ $# -gt 0 ]; do
  case $1 in
    --rate) RATE=$2; shift 2 ;;
    --mib) MIB=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --smoke) MIB=4 ITERS=1; shift ;;
    *) echo "four_hosts_bench: unknown argument '$1'"; exit 2 ;;
  esac
done
TOOL=$BIN/meshstore PEER=$BIN/meshstore_test_peer
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../../tests/integration/netns_hosts.sh"
netns_require_root
command -v tc >/dev/null || { echo "SKIP: tc (iproute2) is not installed"; exit 77; }

SW=ms4bsw_$$
H=(ms4b0_$$ ms4b1_$$ ms4b2_$$ ms4b3_$$)
ADDR=(10.234.0.1 10.234.0.2 10.234.0.3 10.234.0.4)
namespaces=("${H[@]}" "$SW")
PORT=29517
STORE=${ADDR[0]}:$PORT
LOG=$(mktemp -d)
pids=()
trap netns_cleanup EXIT
fail() {
  echo "four_hosts_bench: $*"
  for f in "$LOG"/*; do echo "--- ${f##*/}"; cat "$f"; done
  exit 1
}

netns_bridge_hosts "$SW" "$LOG/err" "${H[0]}:${ADDR[0]}" "${H[1]}:${ADDR[1]}" \
  "${H[2]}:${ADDR[2]}" "${H[3]}:${ADDR[3]}"
rm -f "$LOG/err"
for i in 0 1 2 3; do
  ip netns exec "${H[$i]}" tc qdisc add dev eth0 root tbf rate "${RATE}mbit" burst 256kb latency 50ms
done

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# raw: one TCP stream of MIB MiB from host1 to host0, seconds.
raw_once() {
  host_run 0 python3 - "$MIB" "${ADDR[0]}" "${ADDR[1]}" "${H[1]}" <<'EOF'
import os, socket, subprocess, sys, time
mib, me, peer, ns = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
n = int(mib * (1 << 20))
srv = socket.socket()
srv.bind((me, 0))
srv.listen(1)
port = srv.getsockname()[1]
sender = subprocess.Popen(["ip", "netns", "exec", ns, "python3", "-c",
    "import socket,sys\ns=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n"
    "b=bytes(1<<20)\nn=int(sys.argv[3])\n"
    "while n>0:\n k=min(n,len(b)); s.sendall(b[:k]); n-=k\ns.shutdown(socket.SHUT_WR); s.recv(1)",
    me, str(port), str(n)])
conn, _ = srv.accept()
got, t0 = 0, None
while got < n:
    chunk = conn.recv(1 << 20)
    if not chunk:
        break
    if t0 is None:
        t0 = time.perf_counter()
    got += len(chunk)
secs = time.perf_counter() - t0
conn.close()
sender.wait(timeout=60)
if got != n:
    sys.exit("raw: received %d of %d bytes" % (got, n))
print("%.6f" % secs)
EOF
}

MESHSTORE_LOG_LEVEL=warn host_spawn 0 "$LOG/serve" "$TOOL" serve --host "${ADDR[0]}" --port "$PORT" \
  --strategy per_host
wait_for "$LOG/serve" "serving on $STORE" || fail "the store did not start"

# Host1's volume (per_host) holds the published versions' manifests.
host_spawn 1 "$LOG/hold" "$PEER" hold "$STORE" anchor 0
wait_for "$LOG/hold" "ready" || fail "host1's rank did not start"

# publish PREFIX MIB: host1 publishes (direct) and keeps the buffer lent.
publish() {
  host_spawn 1 "$LOG/publish_$1" "$PEER" publish-direct "$STORE" "$1" "$2"
  wait_for "$LOG/publish_$1" "^published" || fail "host1 did not publish $1"
}
# read_ms I PREFIX MIB: host I reads it; prints the call's milliseconds.
read_ms() {
  host_run "$1" "$PEER" read-latest "$STORE" "$2" "$3" >"$LOG/read_$1_$2" 2>&1 ||
    fail "host$1's read of $2 failed"
  sed -nE 's/^read latest ok v[0-9]+ in ([0-9.]+) ms$/\1/p' "$LOG/read_$1_$2"
}

publish tiny 0.004
publish big "$MIB"
raw=() tiny=() one=() three=()
for it in $(seq 1 "$ITERS"); do
  echo "four_hosts_bench: round $it/$ITERS" >&2
  raw+=("$(raw_once)") || fail "the raw stream failed"
  tiny+=("$(read_ms 0 tiny 0.004)")
  one+=("$(read_ms 0 big "$MIB")")
  readers=()
  for i in 0 2 3; do
    read_ms "$i" big "$MIB" >"$LOG/three_$i" &
    readers+=($!)
  done
  for r in "${readers[@]}"; do wait "$r" || fail "a concurrent read failed"; done
  # The three readers together: the slowest one.
  three+=("$(cat "$LOG"/three_* | sort -g | tail -1)")
done
raw_s=$(printf '%s\n' "${raw[@]}" | median)
tiny_ms=$(printf '%s\n' "${tiny[@]}" | median)
one_ms=$(printf '%s\n' "${one[@]}" | median)
three_ms=$(printf '%s\n' "${three[@]}" | median)
bytes=$(python3 -c "print(int($MIB * (1 << 20)) // 4 * 4)")
python3 - "$RATE" "$bytes" "$raw_s" "$tiny_ms" "$one_ms" "$three_ms" "$ITERS" <<'EOF'
import json, sys
rate, nbytes, raw_s, tiny_ms, one_ms, three_ms, iters = sys.argv[1:]
nbytes, raw_s = int(nbytes), float(raw_s)
tiny_ms, one_ms, three_ms = float(tiny_ms), float(one_ms), float(three_ms)
goodput = nbytes / raw_s
print("four hosts, links shaped to %s Mbit/s, %d bytes, median of %s" % (rate, nbytes, iters))
print("  %-46s %10s %10s %12s" % ("figure", "ms", "MB/s", "vs raw link"))
print("  %-46s %10.1f %10.1f %12.2f" % ("raw tcp stream host1 -> host0", raw_s * 1e3, goodput / 1e6, 1.0))
print("  %-46s %10.1f %10s %12s" % ("4 KiB state dict read (fixed cost)", tiny_ms, "", ""))
print("  %-46s %10.1f %10.1f %12.2f" % ("state dict read, one host", one_ms, nbytes / one_ms / 1e3,
                                         nbytes / one_ms / 1e3 / (goodput / 1e6)))
print("  %-46s %10.1f %10.1f %12.2f" % ("state dict read, three hosts at once", three_ms,
                                         3 * nbytes / three_ms / 1e3,
                                         3 * nbytes / three_ms / 1e3 / (goodput / 1e6)))
print(json.dumps({"scenario": "four-hosts", "rate_mbit": float(rate), "bytes": nbytes,
                  "raw_goodput_bytes_per_s": goodput, "tiny_ms": tiny_ms, "one_ms": one_ms,
                  "three_ms": three_ms}))
EOF
