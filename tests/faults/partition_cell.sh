#!/usr/bin/env bash
# The fault matrix's partition cell (docs/reliability.md): two hosts as
# network namespaces joined by a veth pair. Host A runs the store (per_host),
# a rank holding host A's volume with a 1 MiB key "near", and a reader; host B
# runs a rank holding host B's volume with a 64 MiB key "far". The reader
# reads far (over tcp, across the link) and near in turn; while it does,
# host B's end of the link goes down silently (no FIN, no RST). Checks, as
# every cell of the matrix does:
#   1. the read in flight answers within the bound (20 s after the cut: the
#      store's connection timeout of 10 s, then the controller's push);
#   2. its error names what went away (host B's volume);
#   3. no read ever returns a torn value (the reader checks every element);
#   4. the survivor keeps serving: 20 more reads of near, on host A's volume;
#   5. nothing is left: every process exits, and after `gc` no shared memory
#      of any of them remains.
# Writes the cell's row of the matrix's table to ROW_FILE when given.
# Traffic stays inside the namespaces it creates. Exit 77 (ctest: skipped)
# without root or network namespaces.
#   partition_cell.sh MESHSTORE_TOOL TEST_PEER [ROW_FILE]
set -u
TOOL=$1 PEER=$2 ROW=${3:-}
. "$(dirname "$0")/../integration/netns_hosts.sh"
netns_require_root

A=mspart_a_$$ B=mspart_b_$$ VA=mspa$$ VB=mspb$$
ADDR_A=10.232.0.1 ADDR_B=10.232.0.2 PORT=29517
BOUND_MS=20000
LOG=$(mktemp -d)
pids=()
trap netns_cleanup EXIT
fail() {
  echo "partition cell: $*"
  for f in serve hold_a hold_b reader; do echo "--- $f"; cat "$LOG/$f" 2>/dev/null; done
  exit 1
}

netns_two_hosts "$A" "$B" "$VA" "$VB" "$ADDR_A" "$ADDR_B" "$LOG/err"
# Host B sends at 400 Mbit/s, so a 64 MiB read takes over a second and the
# cut lands in the middle of one (the row says whether it did).
command -v tc >/dev/null &&
  ip netns exec "$B" tc qdisc add dev "$VB" root tbf rate 400mbit burst 256kb latency 50ms

MESHSTORE_LOG_LEVEL=warn MESHSTORE_HOST=hostA ip netns exec "$A" "$TOOL" serve --host "$ADDR_A" \
  --port "$PORT" --strategy per_host >"$LOG/serve" 2>&1 &
pids+=($!)
wait_for "$LOG/serve" "serving on $ADDR_A:$PORT" || fail "the store did not start"
MESHSTORE_HOST=hostA ip netns exec "$A" "$PEER" hold "$ADDR_A:$PORT" near 0 262144 \
  >"$LOG/hold_a" 2>&1 &
pids+=($!)
MESHSTORE_HOST=hostB ip netns exec "$B" "$PEER" hold "$ADDR_A:$PORT" far 0 16777216 \
  >"$LOG/hold_b" 2>&1 &
pids+=($!)
wait_for "$LOG/hold_a" "ready" || fail "host A's rank did not start"
wait_for "$LOG/hold_b" "ready" || fail "host B's rank did not start"

MESHSTORE_HOST=hostA ip netns exec "$A" "$PEER" read-loop "$ADDR_A:$PORT" far near \
  >"$LOG/reader" 2>&1 &
reader=$!
pids+=($reader)
wait_for "$LOG/reader" "far reads ok" || fail "the reader never read across the link"
wait_for "$LOG/reader" "far read 1 starting" || fail "the reader stopped reading"
cut_ms=$(date +%s%3N)
ip -n "$B" link set "$VB" down

# The reader ends by itself once its far read failed and it read near 20
# times; bounded here so a hang fails the cell.
deadline=$(( $(date +%s) + 60 ))
while kill -0 "$reader" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
kill -0 "$reader" 2>/dev/null && fail "the reader hung for 60 s after the cut"
wait "$reader"
reader_rc=$?

grep -q "^torn" "$LOG/reader" && fail "a read returned a torn value"
cut_result "$LOG/reader" "$cut_ms" || fail "the read across the cut link never failed"
[ "$answer_ms" -le "$BOUND_MS" ] || fail "the read answered $answer_ms ms after the cut (bound $BOUND_MS)"
grep -q "hostB" <<<"$error" || fail "the error does not name host B's volume: $error"
survivors=$(sed -nE 's/^near after: ([0-9]+) ok/\1/p' "$LOG/reader")
[ "$reader_rc" -eq 0 ] && [ "${survivors:-0}" -eq 20 ] ||
  fail "host A's key stopped serving after the cut (${survivors:-0}/20 reads)"

# Nothing left: the survivors stop on SIGTERM, host B's rank (cut off) is
# killed; gc collects the killed one's shared memory; then none remains.
stop_all_and_collect
[ -z "$left" ] || fail "left behind:$left"

row="| partition (host B's link cut) | get | (none) | failed $answer_ms ms after the cut (read in flight: $in_flight): ${error//|/\\|} | yes: 20 of 20 reads of host A's key after | none | pass |"
echo "$row"
[ -n "$ROW" ] && echo "$row" >"$ROW"
echo "partition cell: ok"
