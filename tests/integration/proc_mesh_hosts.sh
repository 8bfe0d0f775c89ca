#!/usr/bin/env bash
# A process mesh across "hosts": network namespaces joined by a veth pair.
# `meshstore agent` runs in host B; a controller in host A attaches to it,
# spawns an actor mesh there and checks its members run in host B's
# namespace; then the controller is killed with -9 and the agent must stop
# the workers it started. Traffic stays inside the namespaces made here.
# Exit 77 (ctest: skipped) when namespaces cannot be made here.
set -u
TOOL=$1 TESTS=$2
. "$(dirname "$0")/netns_hosts.sh"
netns_require_root

A=mspm_a_$$ B=mspm_b_$$ VA=mspa$$ VB=mspb$$
ADDR_A=10.232.0.1 ADDR_B=10.232.0.2 PORT=29601
LOG=$(mktemp -d)
pids=()
trap netns_cleanup EXIT

netns_two_hosts "$A" "$B" "$VA" "$VB" "$ADDR_A" "$ADDR_B" "$LOG/err"

ip netns exec "$B" "$TOOL" agent --listen "$ADDR_B:$PORT" --grace-ms 2000 >"$LOG/agent" 2>&1 &
pids+=($!)
wait_for "$LOG/agent" "agent listening on $ADDR_B:$PORT" || exit 1

# 1. Attach, spawn, call: the members run in host B.
if ! MESHSTORE_TEST_ROLE=netns-controller MESHSTORE_TEST_AGENT="$ADDR_B:$PORT" \
     MESHSTORE_TEST_BIND="$ADDR_A" timeout 60 ip netns exec "$A" "$TESTS" >"$LOG/ctl" 2>&1; then
  echo "the controller in host A failed:"; cat "$LOG/ctl"; echo "agent:"; cat "$LOG/agent"; exit 1
fi
cat "$LOG/ctl"
grep -q "netns attach: ok" "$LOG/ctl" || exit 1

# 2. A controller killed with -9: the agent stops the workers it started.
MESHSTORE_TEST_ROLE=attach-controller MESHSTORE_TEST_AGENT="$ADDR_B:$PORT" \
  ip netns exec "$A" env MESHSTORE_TEST_BIND="$ADDR_A" "$TESTS" >"$LOG/ctl2" 2>&1 &
ctl=$!
pids+=($ctl)
wait_for "$LOG/ctl2" "pids:" || { cat "$LOG/agent"; exit 1; }
read -r _ w1 w2 < <(grep "pids:" "$LOG/ctl2")
kill -9 "$ctl"
deadline=$(( $(date +%s) + 30 ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  kill -0 "$w1" 2>/dev/null || kill -0 "$w2" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$w1" 2>/dev/null || kill -0 "$w2" 2>/dev/null; then
  echo "workers $w1 $w2 outlived their killed controller by 30 s"; cat "$LOG/agent"; exit 1
fi
grep -q "its controller went away" "$LOG/agent" || { echo "the agent did not say why:"; cat "$LOG/agent"; exit 1; }

# 3. Host B vanishes silently (its link goes down: no FIN, no RST). BASP
# heartbeats stop, and the controller's supervision must report the member
# lost within its connection timeout (MeshOptions::connection_timeout, 3 s
# in this controller), not never.
MESHSTORE_TEST_ROLE=netns-vanish-controller MESHSTORE_TEST_AGENT="$ADDR_B:$PORT" \
  MESHSTORE_TEST_BIND="$ADDR_A" ip netns exec "$A" "$TESTS" >"$LOG/ctl3" 2>&1 &
ctl=$!
pids+=($ctl)
wait_for "$LOG/ctl3" "spawned" || { cat "$LOG/agent"; exit 1; }
ip -n "$B" link set "$VB" down
deadline=$(( $(date +%s) + 40 ))
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$ctl" 2>/dev/null; do sleep 0.2; done
if kill -0 "$ctl" 2>/dev/null || ! grep -q "vanished host detected" "$LOG/ctl3"; then
  echo "the controller did not report the vanished host within 40 s:"; cat "$LOG/ctl3"; exit 1
fi
grep "vanished host detected" "$LOG/ctl3"
echo "proc mesh across hosts: ok (attach; a killed controller's workers stopped by the agent; a vanished host reported)"
