#!/usr/bin/env bash
# Four hosts on one machine: network namespaces host0..host3 joined by a
# bridge (in a fifth namespace, the "switch"). The store runs on host0 with
# the per_host strategy; one rank on each host holds that host's volume.
#   1. per_host: each host's rank stored its key in its own host's volume;
#   2. a state dict published on host1 (direct: the publisher's own buffer)
#      is read on host0, host2 and host3, over tcp;
#   3. a tensor put sharded by rows from host2 and host3 is read sharded by
#      columns on host0 and host1 (each reader's box spans both volumes);
#   4. host1 is cut off (its link goes down silently, no FIN, no RST) while
#      host3 reads a 64 MiB key of host1's: the read answers within the bound
#      with an error naming host1's volume; host0, host2 and host3 keep
#      working (reads across hosts, the resharded read again), the store
#      drops host1's volume, and nothing is left behind.
# Traffic stays inside the namespaces it creates. Exit 77 (ctest: skipped)
# without root or network namespaces.
#   four_hosts.sh MESHSTORE_TOOL TEST_PEER RESHARD
set -u
TOOL=$1 PEER=$2 RESHARD=$3
. "$(dirname "$0")/netns_hosts.sh"
netns_require_root

SW=ms4sw_$$
H=(ms4h0_$$ ms4h1_$$ ms4h2_$$ ms4h3_$$)
ADDR=(10.233.0.1 10.233.0.2 10.233.0.3 10.233.0.4)
namespaces=("${H[@]}" "$SW")
PORT=29517
STORE=${ADDR[0]}:$PORT
BOUND_MS=20000
LOG=$(mktemp -d)
pids=()
trap netns_cleanup EXIT
fail() {
  echo "four hosts: $*"
  for f in "$LOG"/*; do echo "--- ${f##*/}"; cat "$f"; done
  exit 1
}

netns_bridge_hosts "$SW" "$LOG/err" "${H[0]}:${ADDR[0]}" "${H[1]}:${ADDR[1]}" \
  "${H[2]}:${ADDR[2]}" "${H[3]}:${ADDR[3]}"
rm -f "$LOG/err"
# Host1 sends at 400 Mbit/s, so a 64 MiB read from it takes over a second
# and the cut lands in the middle of one (the last line says whether it did).
command -v tc >/dev/null &&
  ip netns exec "${H[1]}" tc qdisc add dev eth0 root tbf rate 400mbit burst 256kb latency 50ms

MESHSTORE_LOG_LEVEL=warn host_spawn 0 "$LOG/serve" "$TOOL" serve --host "${ADDR[0]}" --port "$PORT" \
  --strategy per_host
wait_for "$LOG/serve" "serving on $STORE" || fail "the store did not start"

# One rank per host holds the host's volume and puts a key of float 7s:
# 1 MiB on host0, host2 and host3, 64 MiB on host1.
for i in 0 1 2 3; do
  elements=262144
  [ "$i" -eq 1 ] && elements=16777216
  host_spawn "$i" "$LOG/hold$i" "$PEER" hold "$STORE" "key$i" 0 "$elements"
done
for i in 0 1 2 3; do wait_for "$LOG/hold$i" "ready" || fail "host$i's rank did not start"; done

# 1. per_host: four volumes, one per host, each holding its own host's key.
host_run 0 "$TOOL" stat --store "$STORE" >"$LOG/stat" 2>&1 || fail "stat failed"
for i in 0 1 2 3; do
  objects=$(awk -v v="host:host$i" '$1 == v { print $(NF - 2) }' "$LOG/stat")
  [ "$objects" = "1" ] || fail "host$i's volume does not hold exactly its rank's key"
done
[ "$(grep -c '^host:' "$LOG/stat")" -eq 4 ] || fail "not exactly four volumes"
echo "per_host: each host's key is in its own volume"

# 2. A state dict published on host1, read on the three others over tcp.
host_spawn 1 "$LOG/publish" "$PEER" publish-direct "$STORE" weights 8
wait_for "$LOG/publish" "^published" || fail "host1 did not publish"
readers=()
for i in 0 2 3; do
  MESHSTORE_LOG_LEVEL=info host_spawn "$i" "$LOG/latest$i" "$PEER" read-latest "$STORE" weights 8
  readers+=("$spawned")
done
for r in "${readers[@]}"; do wait "$r" || fail "a read of host1's state dict failed"; done
for i in 0 2 3; do
  grep -q "read latest ok" "$LOG/latest$i" || fail "host$i did not read the state dict"
  grep -q "volume 'lend:host1/[^']*': transport tcp" "$LOG/latest$i" ||
    fail "host$i did not read host1's lent buffer over tcp"
done
echo "state dict: published on host1, read on host0, host2 and host3 over tcp"

# 3. Put sharded by rows from host2 and host3, read by columns on host0 and
#    host1: each reader's box has rows in both volumes.
SHAPE=256x1024
puts=()
for r in 0 1; do
  host_spawn $((r + 2)) "$LOG/put$r" "$RESHARD" --store "$STORE" --mode put --key w --shape "$SHAPE" \
    --mesh 2 --placement S0 --rank "$r"
  puts+=("$spawned")
done
for p in "${puts[@]}"; do wait "$p" || fail "a sharded put failed"; done
# get_resharded I RANK LOGNAME: host I reads rank RANK's column box.
get_resharded() {
  MESHSTORE_LOG_LEVEL=info host_run "$1" "$RESHARD" --store "$STORE" --mode get --key w --shape "$SHAPE" \
    --mesh 2 --placement S1 --rank "$2" >"$LOG/$3" 2>&1 || return 1
  grep -q "rank $2 .*ok$" "$LOG/$3" || return 1
  for v in 2 3; do grep -q "volume 'host:host$v': transport tcp" "$LOG/$3" || return 1; done
}
get_resharded 0 0 get0 || fail "host0's resharded read failed"
get_resharded 1 1 get1 || fail "host1's resharded read failed"
echo "resharding: put by rows on host2 and host3, read by columns on host0 and host1"

# 4. Host1 cut off while host3 reads its 64 MiB key.
host_spawn 3 "$LOG/reader" "$PEER" read-loop "$STORE" key1 key2
reader=$spawned
wait_for "$LOG/reader" "far reads ok" || fail "host3 never read host1's key"
wait_for "$LOG/reader" "far read 1 starting" || fail "host3 stopped reading"
cut_ms=$(date +%s%3N)
ip -n "${H[1]}" link set eth0 down
deadline=$(($(date +%s) + 60))
while kill -0 "$reader" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
kill -0 "$reader" 2>/dev/null && fail "host3's reader hung for 60 s after the cut"
wait "$reader"
reader_rc=$?
grep -q "^torn" "$LOG/reader" && fail "a read returned a torn value"
cut_result "$LOG/reader" "$cut_ms" || fail "the read from the cut host never failed"
[ "$answer_ms" -le "$BOUND_MS" ] || fail "the read answered $answer_ms ms after the cut (bound $BOUND_MS)"
grep -q "host1" <<<"$error" || fail "the error does not name host1's volume: $error"
survivors=$(sed -nE 's/^near after: ([0-9]+) ok/\1/p' "$LOG/reader")
[ "$reader_rc" -eq 0 ] && [ "${survivors:-0}" -eq 20 ] ||
  fail "host2's key stopped serving host3 after the cut (${survivors:-0}/20 reads)"

# The survivors keep working: the store drops host1's volume (bounded), host0
# reads host3's key and the resharded tensor again.
deadline=$(($(date +%s) + 40))
while [ "$(date +%s)" -lt "$deadline" ]; do
  host_run 0 "$TOOL" stat --store "$STORE" >"$LOG/stat2" 2>&1
  grep -q "^host:host1 " "$LOG/stat2" || break
  sleep 0.2
done
grep -q "^host:host1 " "$LOG/stat2" && fail "host1's volume is still registered 40 s after the cut"
[ "$(grep -c '^host:' "$LOG/stat2")" -eq 3 ] || fail "the survivors' volumes are not all there"
host_run 0 "$PEER" read "$STORE" key3 >"$LOG/read3" 2>&1 || fail "host0 cannot read host3's key after the cut"
get_resharded 0 1 get0_after || fail "host0's resharded read failed after the cut"
echo "cut: host1 cut off; host3's read failed $answer_ms ms after the cut (in flight: $in_flight): $error"
echo "survivors: 20 of 20 reads of host2's key on host3, host0 still reads host3's key and the resharded tensor"

# Nothing left: the survivors stop on SIGTERM, host1's processes (cut off)
# are killed; gc collects the killed ones' shared memory; then none remains.
stop_all_and_collect
[ -z "$left" ] || fail "left behind:$left"
echo "four hosts: ok"
