#!/usr/bin/env bash
# Two hosts on one machine: network namespaces joined by a veth pair. A
# store server runs in host A; a rank in host B hosts host B's volume
# (per_host strategy) and puts a tensor; a reader in host A reads it across
# the link; then it cuts the link silently and checks host A notices.
# Traffic stays inside the namespaces this script creates.
# Exit 77 (ctest: skipped) when namespaces cannot be made here.
set -u
TOOL=$1 PEER=$2
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root to create network namespaces"; exit 77; fi
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }

A=ms2h_a_$$ B=ms2h_b_$$ VA=ms2a$$ VB=ms2b$$
ADDR_A=10.231.0.1 ADDR_B=10.231.0.2 PORT=29517
LOG=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  # Killed processes cannot unlink their shared memory: collect it.
  for p in "${pids[@]}"; do "$TOOL" gc --pid "$p" >/dev/null 2>&1; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$LOG"
}
trap cleanup EXIT

if ! ip netns add "$A" 2>"$LOG/err" || ! ip netns add "$B" 2>>"$LOG/err" ||
   ! ip link add "$VA" type veth peer name "$VB" 2>>"$LOG/err"; then
  echo "SKIP: cannot create network namespaces here: $(cat "$LOG/err")"; exit 77
fi
set -e
ip link set "$VA" netns "$A"
ip link set "$VB" netns "$B"
ip -n "$A" addr add "$ADDR_A/24" dev "$VA"
ip -n "$B" addr add "$ADDR_B/24" dev "$VB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up
set +e

# Waits (bounded) until file $1 contains $2.
wait_for() {
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1:"; cat "$1"; return 1
}

MESHSTORE_LOG_LEVEL=warn MESHSTORE_HOST=hostA ip netns exec "$A" "$TOOL" serve --host "$ADDR_A" --port "$PORT" --strategy per_host \
  >"$LOG/serve" 2>&1 &
pids+=($!)
wait_for "$LOG/serve" "serving on $ADDR_A:$PORT" || exit 1

MESHSTORE_HOST=hostB ip netns exec "$B" "$PEER" hold "$ADDR_A:$PORT" from_host_b 0 1048576 >"$LOG/peer" 2>&1 &
pids+=($!)
wait_for "$LOG/peer" "ready" || exit 1

ip netns exec "$A" "$TOOL" stat --store "$ADDR_A:$PORT" | tee "$LOG/stat"
grep -q "host:hostB" "$LOG/stat" || { echo "host B's volume is not registered"; exit 1; }
# 4 MiB across the link: the bytes move over the tcp data plane (the two
# namespaces have different host identities, so shm is never chosen).
if ! MESHSTORE_LOG_LEVEL=info ip netns exec "$A" "$PEER" read "$ADDR_A:$PORT" from_host_b >"$LOG/read" 2>&1; then
  echo "reading host B's tensor from host A failed"; cat "$LOG/read" "$LOG/peer"; exit 1
fi
grep -q "volume 'host:hostB': transport tcp" "$LOG/read" ||
  { echo "host A did not pick the tcp transport for host B's volume:"; cat "$LOG/read"; exit 1; }
# Cut the link silently (host B's side goes down: no RST, no FIN). BASP
# heartbeats stop, and host A must declare host B's volume down within the
# connection timeout (10 s) instead of never.
ip -n "$B" link set "$VB" down
deadline=$(( $(date +%s) + 40 ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  ip netns exec "$A" "$TOOL" stat --store "$ADDR_A:$PORT" >"$LOG/stat2" 2>&1
  grep -q "host:hostB" "$LOG/stat2" || break
  sleep 0.2
done
if grep -q "host:hostB" "$LOG/stat2"; then
  echo "host B vanished silently but its volume is still registered after 40 s"; cat "$LOG/serve"; exit 1
fi
grep -q "volume 'host:hostB' went down" "$LOG/serve" || { echo "no loss reported:"; cat "$LOG/serve"; exit 1; }
echo "two hosts: ok (a silent cut was detected)"
