#!/usr/bin/env bash
# Two hosts on one machine: network namespaces joined by a veth pair. A
# store server runs in host A; a rank in host B hosts host B's volume
# (per_host strategy) and puts a tensor; a reader in host A reads it across
# the link; then it cuts the link silently and checks host A notices.
# Traffic stays inside the namespaces this script creates.
# Exit 77 (ctest: skipped) when namespaces cannot be made here.
set -u
TOOL=$1 PEER=$2
. "$(dirname "$0")/netns_hosts.sh"
netns_require_root

A=ms2h_a_$$ B=ms2h_b_$$ VA=ms2a$$ VB=ms2b$$
ADDR_A=10.231.0.1 ADDR_B=10.231.0.2 PORT=29517
LOG=$(mktemp -d)
pids=()
trap netns_cleanup EXIT

netns_two_hosts "$A" "$B" "$VA" "$VB" "$ADDR_A" "$ADDR_B" "$LOG/err"

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
