# Sourced by the multi-host tests: "hosts" as network namespaces joined by a
# veth pair (two) or a bridge (more), and a bounded wait on a log. Traffic
# stays inside them.

# Skips (exit 77) unless this shell may create network namespaces.
netns_require_root() {
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root to create network namespaces"; exit 77; fi
  command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
}

# netns_two_hosts NS_A NS_B VETH_A VETH_B ADDR_A ADDR_B ERRFILE: makes both
# namespaces, joins them (ADDR_A/24 in NS_A, ADDR_B/24 in NS_B) and brings
# every link up; skips (exit 77) when the namespaces cannot be made here.
netns_two_hosts() {
  local a=$1 b=$2 va=$3 vb=$4 addr_a=$5 addr_b=$6 err=$7
  if ! ip netns add "$a" 2>"$err" || ! ip netns add "$b" 2>>"$err" ||
     ! ip link add "$va" type veth peer name "$vb" 2>>"$err"; then
    echo "SKIP: cannot create network namespaces here: $(cat "$err")"; exit 77
  fi
  set -e
  ip link set "$va" netns "$a"
  ip link set "$vb" netns "$b"
  ip -n "$a" addr add "$addr_a/24" dev "$va"
  ip -n "$b" addr add "$addr_b/24" dev "$vb"
  for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
  ip -n "$a" link set "$va" up
  ip -n "$b" link set "$vb" up
  set +e
}

# netns_bridge_hosts SWITCH ERRFILE NS:ADDR...: makes namespace SWITCH with a
# bridge and one namespace per NS:ADDR, each joined to the bridge by a veth
# pair (its end is "eth0", at ADDR/24, the bridge's end "p<I>" in SWITCH);
# brings every link up. Nothing is made outside these namespaces. Skips
# (exit 77) when they cannot be made here.
netns_bridge_hosts() {
  local sw=$1 err=$2 i=0
  shift 2
  if ! ip netns add "$sw" 2>"$err" || ! ip -n "$sw" link add br0 type bridge 2>>"$err"; then
    echo "SKIP: cannot create a bridged network namespace here: $(cat "$err")"; exit 77
  fi
  set -e
  ip -n "$sw" link set lo up
  ip -n "$sw" link set br0 up
  for host in "$@"; do
    local ns=${host%%:*} addr=${host#*:}
    ip netns add "$ns"
    ip -n "$sw" link add "p$i" type veth peer name eth0
    ip -n "$sw" link set eth0 netns "$ns"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    i=$((i + 1))
  done
  set +e
}

# netns_spawn NS HOST LOG CMD...: starts CMD in namespace NS with host
# identity HOST (MESHSTORE_HOST), its output to LOG, in the background; adds
# its pid to the array `pids` and sets `spawned` to it. CMD is the process
# itself (ip netns exec execs it), not a shell around it, so killing the
# pid kills it.
netns_spawn() {
  local ns=$1 host=$2 log=$3
  shift 3
  MESHSTORE_HOST=$host ip netns exec "$ns" "$@" >"$log" 2>&1 &
  spawned=$!
  pids+=("$spawned")
}

# host_run I CMD...: runs CMD on host I of the array H (namespace ${H[I]},
# host identity "hostI"). host_spawn I LOG CMD...: the same in the
# background (netns_spawn).
host_run() {
  local i=$1
  shift
  MESHSTORE_HOST=host$i ip netns exec "${H[$i]}" "$@"
}
host_spawn() {
  local i=$1
  shift
  netns_spawn "${H[$i]}" "host$i" "$@"
}

# cut_result LOG CUT_MS: reads the "far failed: start_ms=S end_ms=E: ERROR"
# line of meshstore_test_peer read-loop's LOG for a cut made at CUT_MS and
# sets `error`, `answer_ms` (E - CUT_MS) and `in_flight` (yes when the
# failed read started before the cut). Returns 1 when the log has no such
# line (the read never failed).
cut_result() {
  local line start_ms end_ms
  line=$(grep "^far failed:" "$1") || return 1
  start_ms=$(sed -E 's/.*start_ms=([0-9]+).*/\1/' <<<"$line")
  end_ms=$(sed -E 's/.*end_ms=([0-9]+).*/\1/' <<<"$line")
  error=${line#*: }
  error=${error#*: }
  answer_ms=$((end_ms - $2))
  in_flight=no
  [ "$start_ms" -le "$2" ] && in_flight=yes
  return 0
}

# stop_all_and_collect: every process of `pids` is asked to stop (SIGTERM,
# 10 s), then killed; `$TOOL gc` collects the shared memory of the killed
# ones. Sets `left` to what remains: "shm-of-PID" and "process-PID" words,
# empty when nothing does.
stop_all_and_collect() {
  local p alive
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 100); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for p in "${pids[@]}"; do "$TOOL" gc --pid "$p" >/dev/null 2>&1; done
  left=""
  for p in "${pids[@]}"; do
    ls /dev/shm 2>/dev/null | grep -q "^meshstore\.$p\." && left="$left shm-of-$p"
    kill -0 "$p" 2>/dev/null && left="$left process-$p"
  done
}

# Waits (bounded: 30 s) until file $1 contains $2.
wait_for() {
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1:"; cat "$1"; return 1
}

# The EXIT trap of the multi-host tests: kills every process in the array
# `pids`, collects the shared memory the killed ones could not unlink (with
# `$TOOL gc`, when TOOL is set), deletes the namespaces $A and $B (or those
# of the array `namespaces`) and the folder $LOG.
netns_cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "${TOOL:-}" ]; then
    for p in "${pids[@]}"; do "$TOOL" gc --pid "$p" >/dev/null 2>&1; done
  fi
  for ns in "${A:-}" "${B:-}" "${namespaces[@]:-}"; do
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$LOG"
}
